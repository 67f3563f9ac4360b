"""A memory of the flow shown, for a stream that reaches the net through a starved block codec.

Why: a starved encoder leaves blocks as they were while the picture under them moves, so one pair shows them still
and the net's flow there is wrong in a way the pairs before were not (docs/notebook/2026-12-01-what-a-starved-
encoder-hides.md). A memory of the flows before, carried forward to the new pair, fills that in. How much to trust it
the stream says itself, without a label: of a few gains, the one whose memory has best predicted the net's next flows
(exponential smoothing's one-step-ahead error), and only where it predicted clearly better than none (gain 1). Only
for such a stream: on real footage that a codec did not starve, the gain a stream chooses so falls as low and the
memory makes its flow 17-71 % worse (docs/notebook/2026-12-06-a-memory-of-the-flow-chosen-by-the-stream.md); on real
footage a starved codec went through it helped or stayed within 1-3 %
(docs/notebook/2026-12-06-a-memory-of-the-flow-for-a-starved-codec.md).

Tensor ops on the flow's device: nothing is read back to the host.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .flow_loss import pixel_grid, sample_at

#: The gains a memory is kept at (1: the net's flow alone), its remembered flow becoming gain x the new flow +
#: (1 - gain) x the remembered one carried forward.
GAINS = (1.0, 0.85, 0.7, 0.5, 0.35, 0.2)
#: The weight of the newest pair in the running mean of each gain's prediction error (about the last 100 pairs).
PREDICTION_WEIGHT = 0.01
#: How many predictions each gain makes before the memory shows any gain but 1.
TRUSTED_AFTER = 20
#: A gain below 1 is shown only where its prediction error is this share and this many pixels under gain 1's.
MARGIN, MARGIN_PX = 0.05, 0.01
#: A flow whose mean length is under this (px) shows no motion: a frame paired with itself (a scene cut, a new shot)
#: or a still picture. The memory starts again from it rather than carry an old motion into it.
STILL_PX = 0.01


def length(flow: Tensor) -> Tensor:
    """Each pixel's flow length (N, H, W) of ``flow`` (N, 2, H, W): ``torch.hypot``, where ``Tensor.norm(dim=1)`` took
    6-12 ms of the memory's 15 ms a pair at 128x96 on one CPU thread."""
    return torch.hypot(*flow.unbind(1))


def carried(memory: Tensor, flow: Tensor) -> Tensor:
    """``memory`` (G, 2, H, W: flows of the pair before) carried to the new pair: each pixel takes the remembered flow
    from where ``flow`` (1, 2, H, W) says it was a frame before."""
    _, _, h, w = flow.shape
    return sample_at(memory, (pixel_grid(h, w, flow.device, flow.dtype) - flow).expand(len(memory), -1, -1, -1))


class FlowMemory:
    """The flow to show for each new pair (module docstring): call it with the net's flow of each pair in turn;
    ``reset`` when the pairs stop following one another (another size, another stream's state)."""

    def __init__(self) -> None:
        self.memory: Tensor | None = None  # (G, 2, H, W), one remembered flow per gain
        self.errors: Tensor | None = None  # (G,), each gain's running mean prediction error, px
        self.predictions = 0

    def reset(self) -> None:
        self.memory, self.errors, self.predictions = None, None, 0

    def __call__(self, flow: Tensor) -> Tensor:
        """The flow to show for the pair whose net's flow is ``flow`` (1, 2, H, W)."""
        flow = torch.nan_to_num(flow.detach())
        if self.memory is None or self.memory.shape[1:] != flow.shape[1:] or self.memory.device != flow.device:
            self.reset()
            self.memory = flow.expand(len(GAINS), -1, -1, -1).clone()
            return flow
        predicted = carried(self.memory, flow)
        # a camera's shake changes every pixel's flow at once: the prediction follows the whole picture's change
        predicted = predicted + (flow - predicted).flatten(2).median(2).values[..., None, None]
        error = length(predicted - flow).mean((1, 2))
        still = length(flow).mean() < STILL_PX
        self.errors = error if self.errors is None else torch.lerp(self.errors, error, PREDICTION_WEIGHT)
        gains = torch.tensor(GAINS, device=flow.device, dtype=flow.dtype)[:, None, None, None]
        self.memory = torch.where(still, flow, gains * flow + (1 - gains) * predicted)
        self.predictions += 1
        if self.predictions < TRUSTED_AFTER:
            return flow
        best, none = self.errors.argmin(), self.errors[0]
        better = (self.errors[best] <= (1 - MARGIN) * none) & (none - self.errors[best] >= MARGIN_PX)
        return self.memory.index_select(0, torch.where(better, best, 0).view(1))
