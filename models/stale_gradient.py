"""A PARTIME stage's stale gradient, moved with the video's motion (``pipeline_core.stage.GradAlign``).

Why: under PARTIME a stage pushes through the graph of frame f the output gradient that the next stage
computed on frame f - k (k = 2(D-1-h)). The schedule assumes consecutive inputs are alike; in video the
background may be, but a moving object is k frames further on. Pushed through as it came, the gradient
about where the object *was* teaches the pixels it has left (and the background it now covers), so a
coarse stage loses a fast mover that the sequential learner keeps. The flow nets carry their flow so far
in every layer's output (``models.flow_nets``: channels 0-1, previous -> current, in pixels); assuming
the motion holds over the k frames, content at x was at x - k·flow(x) k frames ago, so the gradient is
read from there. Measured on the generated streams by ``bench.flow`` (PARTIME D = 2 and 4 against the
sequential learner, ``bench/results/flow-*.md``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .flow_loss import pixel_grid, sample_at


def motion_aligned(output: Tensor, grad: Tensor, frames_apart: int) -> Tensor:
    """``grad`` (of the output ``frames_apart`` frames earlier) read where each pixel's content was then.

    ``output``: the stage's output for the current frame, ``[flow (2), ...]`` (B, C, H, W). Where the flow is
    still zero (a stage before the first match) the gradient stays where it is; gradient from outside the
    frame is zero. A non-finite flow counts as no motion (the worker's guard deals with a diverged net).
    No host synchronisation, so a CUDA graph can capture it."""
    if output.dim() != 4 or output.shape[1] < 2 or grad.shape[-2:] != output.shape[-2:]:
        raise ValueError(
            f"need a (B, >=2, H, W) output and a gradient of its size, got {tuple(output.shape)}, {tuple(grad.shape)}"
        )
    flow = torch.nan_to_num(output[:, :2], nan=0.0, posinf=0.0, neginf=0.0).to(grad.dtype)
    _, _, h, w = flow.shape
    pos = pixel_grid(h, w, flow.device, flow.dtype) - frames_apart * flow
    return sample_at(grad, pos, padding_mode="zeros")
