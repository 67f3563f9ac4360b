"""A fast mover's halo: the coarsest level spreads its motion over the background around it; propagation takes it back.

A fast mover is found by the coarsest level of a flow net, whose cells are 8 px wide and whose features and
Lucas-Kanade window span several cells, so the mover's motion also lands on the background around it, a halo 10-20 px
wide. The finer levels cannot take it back: their searches reach 1-12 px, and a halo pixel is off by the mover's
speed. On one of the generator's held-out clips a disc moving 26 px per frame over stones (a slow pan) carried its
motion that far: the shipped net, frozen, had 0.83 px of error on that textured background, where Farneback had 0.13
(docs/models.md#a-fast-movers-halo-goes-back-to-the-background).

``FlowPropagation`` is PatchMatch's propagation step (Barnes et al. 2009): each pixel compares its own flow with
those of neighbours 8, 16 and 32 px away along the axes and takes the neighbour's where that explains the frames
clearly better over a window (a mean photometric error under ``1 - gain`` of its own) and better at the pixel
itself: at a mover's corner the window is mostly background, whose flow then explains the window better, but not the
corner (a square's corner cells lost their motion to the window test alone). Only flows that differ by more than
``apart`` px compete: a slow mover's sub-pixel flow varies across it, and letting close values swap only trades one
pixel's noise for another's (box's moving pixels got worse by about a tenth that way; exploratory). It has nothing
to learn; the decision reads the flow without differentiating it, and so does the swap: the gradient of a pixel's
new flow passes to its old one (straight through), as if the coarse level had found the neighbour's flow itself.
Differentiating the swap as well cost 3.5 ms of a 128x96 learning step on one thread, at 1/4 (exploratory).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .flow_cleanup import box_mean, candidate_errors, frames_of


def _shifted(flow: Tensor, dx: int, dy: int) -> Tensor:
    """The flow of the pixel (dx, dy) away, for every pixel (edges replicated)."""
    h, w = flow.shape[-2:]
    reach = max(abs(dx), abs(dy))
    padded = F.pad(flow, [reach] * 4, mode="replicate")
    return padded[..., reach + dy : reach + dy + h, reach + dx : reach + dx + w]


class FlowPropagation(nn.Module):
    """[flow, frames, ...] -> the same tensor with each pixel's flow replaced by a distant neighbour's where that
    explains the pair clearly better (module docstring).

    It decides on the coarsest level's own grid, 1/``factor``, where ``steps`` and ``window`` count cells (1, 2 and 4
    cells of 8 px: neighbours 8, 16 and 32 px away; a 24 px window), and the change is brought back to full
    resolution as it is, cell by cell. Deciding at full resolution cost 16 ms of a 128x96 learning step on one thread
    (81 -> 97 ms) for a flow no better (the frozen net on the generator's held-out clips: 1.085 over all pixels against
    1.088 at 1/8, before the test at the pixel itself came in; tree's hand 2.52 px where the reference is consistent,
    against 2.31); at 1/8 the forward takes 0.7 ms (exploratory)."""

    def __init__(
        self,
        factor: int = 8,
        steps: tuple[int, ...] = (1, 2, 4),
        window: int = 3,
        gain: float = 0.3,
        apart: float = 1.0,
    ) -> None:
        super().__init__()
        self.offsets = [(d * s, e * s) for s in steps for d, e in ((1, 0), (-1, 0), (0, 1), (0, -1))]
        self.factor, self.window, self.gain, self.apart = factor, window, gain, apart / factor

    def forward(self, x: Tensor) -> Tensor:
        f = self.factor
        with torch.no_grad():
            flow = F.avg_pool2d(x[:, :2], f) / f
            candidates = torch.stack([_shifted(flow, dx, dy) for dx, dy in self.offsets], 1)  # (B, K, 2, h, w)
            prev, cur = F.avg_pool2d(frames_of(x), f).split(3, 1)
            tried = torch.cat([flow.unsqueeze(1), candidates], 1)  # its own flow first
            cells = candidate_errors(prev, cur, tried)  # each flow's error per cell
            own, others = box_mean(cells, self.window).split([1, candidates.shape[1]], 1)
            close = (candidates - flow.unsqueeze(1)).square().sum(2) <= self.apart**2
            best, index = others.masked_fill(close, float("inf")).min(1, keepdim=True)
            chosen = candidates.gather(1, index.unsqueeze(2).expand(-1, -1, 2, -1, -1)).squeeze(1)
            better_here = cells[:, 1:].gather(1, index) < cells[:, :1]
            change = torch.where((best < (1 - self.gain) * own) & better_here, chosen - flow, 0.0)
        return torch.cat([x[:, :2] + F.interpolate(change, scale_factor=f) * f, x[:, 2:]], 1)
