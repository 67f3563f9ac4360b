"""Luma: a colour picture's grey level, its channels weighed as ITU-R BT.601 does (the grey level OpenCV's and
classical flow methods read)."""

from __future__ import annotations

from torch import Tensor

LUMA = (0.299, 0.587, 0.114)


def luma(rgb: Tensor) -> Tensor:
    """(B, 1, H, W) of ``rgb`` (B, 3, H, W), in its range."""
    r, g, b = rgb.split(1, 1)
    return LUMA[0] * r + LUMA[1] * g + LUMA[2] * b
