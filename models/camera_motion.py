"""The camera's motion between two frames, read off a flow field: its most common value (a 2-D histogram's peak).

Why: the still gate (``flow_cleanup.StillGate``) falls back, where the pair gives no evidence of motion, to what
the background does. Before a static camera that is zero; before a shaking one it is the camera's motion, which a
flat wall or a car's ceiling shares though nothing in them can be matched. The most common flow is the background's
as long as the background is the largest surface that moves as one; a median of each component flipped to a mover's
motion where movers covered nearly half the picture (bikes), and an affine fit bent towards them. Only small motions
count (``largest_px``): two frames cannot tell a camera that moved from a mover that fills most of the picture before
a plain wall, and a wall painted with a person's motion is the worse mistake
(docs/models.md#the-still-gate-follows-the-camera).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

#: The histogram's bins, in px: also how precisely the camera's motion is known before the bin's mean refines it.
BIN_PX = 0.1
#: The farthest motion read, in px; a camera moving faster leaves no quiet place for the gate to act on anyway.
REACH_PX = 8.0
#: A camera whose motion is below this stood still (zero, exactly): the histogram's own precision.
STILL_PX = 0.1


def camera_motion(flow: Tensor, largest_px: float = REACH_PX) -> Tensor:
    """(B, 2, H, W) flow -> (B, 2, 1, 1): per pair, the mean of the flows in the most populated bin's neighbourhood
    (3 x 3 bins of ``BIN_PX``, within ``REACH_PX``); zero below ``STILL_PX``, above ``largest_px`` or with no flow in
    reach. No gradient, no host sync (the GPU's captured step)."""
    flow = flow.detach()
    b = flow.shape[0]
    bins = 2 * round(REACH_PX / BIN_PX) + 1
    vectors = flow.flatten(2).transpose(1, 2)  # (B, N, 2)
    cells = ((vectors + REACH_PX) / BIN_PX).round().long()
    inside = ((cells >= 0) & (cells < bins)).all(-1)
    cells = cells.clamp(0, bins - 1)
    index = (torch.arange(b, device=flow.device)[:, None] * bins + cells[..., 1]) * bins + cells[..., 0]
    counts = torch.zeros(b * bins * bins, device=flow.device, dtype=flow.dtype)
    counts.index_add_(0, index.flatten(), inside.flatten().to(flow.dtype))
    smoothed = F.avg_pool2d(counts.view(b, 1, bins, bins), 3, stride=1, padding=1).flatten(1)
    peak = smoothed.argmax(1)
    centre = torch.stack([peak % bins, peak // bins], -1).to(flow.dtype) * BIN_PX - REACH_PX  # (B, 2)
    near = (((vectors - centre[:, None]).abs() <= 1.5 * BIN_PX).all(-1) & inside).to(flow.dtype)  # (B, N)
    motion = (vectors * near[..., None]).sum(1) / near.sum(1, keepdim=True).clamp_min(1.0)  # zero if none in reach
    length = motion.norm(dim=1, keepdim=True)
    motion = motion * ((length >= STILL_PX) & (length <= largest_px)).to(flow.dtype)
    return motion[..., None, None]
