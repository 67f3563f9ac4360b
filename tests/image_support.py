"""Small pictures and frame pairs for the flow-cleanup tests (``test_flow_cleanup``, the ``test_still_gate`` files)."""

from __future__ import annotations

import torch


def textured(h: int = 32, w: int = 32, seed: int = 0) -> torch.Tensor:
    """(1, 3, h, w) random colours smoothed over 3 px: texture at every scale a window sees."""
    image = torch.rand(1, 3, h, w, generator=torch.Generator().manual_seed(seed))
    return torch.nn.functional.avg_pool2d(image, 3, 1, 1)


def with_flow(flow: torch.Tensor, prev: torch.Tensor, cur: torch.Tensor) -> torch.Tensor:
    """The tensor the nets' full-resolution layers pass along: ``[flow, previous frame, current frame]``."""
    return torch.cat([flow, prev, cur], 1)


def noisy(image: torch.Tensor, levels: float, seed: int) -> torch.Tensor:
    """``image`` with Gaussian noise of ``levels`` 8-bit levels, rounded to them as a camera's frames are."""
    noise = torch.randn(image.shape, generator=torch.Generator().manual_seed(seed)) * levels / 255
    return ((image + noise).clamp(0, 1) * 255).round() / 255
