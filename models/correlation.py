"""Local correlation: the cost volume of a coarse-to-fine flow net."""

from __future__ import annotations

from torch import Tensor

from .padding import replicate_pad
from .window_products import window_dots


def local_correlation(f0: Tensor, f1: Tensor, radius: int) -> Tensor:
    """(B, (2r+1)², h, w) dot products of f0 with f1 shifted by every offset within ±radius (replicated borders),
    row by row."""
    k = 2 * radius + 1
    offsets = tuple((dy, dx) for dy in range(k) for dx in range(k))
    return window_dots(f0, replicate_pad(f1, [radius] * 4), offsets)
