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

Where the mover is going no flow explains anything: the background it covers in the next frame is occluded, and
its own flow's error, like the mover's, only says how alike two other places look. There the halo stays, 10-20 px
ahead of a hand (tree's last pairs). Those cells fail a forward-backward test instead, against the current frame's
flow back to the previous one by block matching (``backward_flow``): the mover's flow on a cell it will cover lands
on background that stays (its backward flow about zero), not on the mover. Such a cell takes the flow of the
neighbour (8, 16 or 32 px away) most like it in colour that passes the test, in two rounds so that a band wider than
a step fills from its edge (``fill_occluded``): a surface's flow, chosen by what the surface looks like, as the
variational methods' smoothness does where their data term is void
(docs/models.md#what-a-mover-covers-takes-the-flow-of-what-it-looks-like).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .flow_cleanup import box_mean, candidate_errors, frames_of, neighbours
from .flow_loss import flow_lengths, warp
from .padding import replicate_pad


def _chosen(candidates: Tensor, index: Tensor) -> Tensor:
    """(B, 2, h, w): per cell, the flow among ``candidates`` (B, K, 2, h, w) that ``index`` (B, 1, h, w) names."""
    return candidates.gather(1, index.unsqueeze(2).expand(-1, -1, 2, -1, -1)).squeeze(1)


def backward_flow(prev: Tensor, cur: Tensor, radius: int, window: int) -> Tensor:
    """(B, 2, h, w): for every cell of ``cur``, the whole-cell offset within ±``radius`` to the place in ``prev`` whose
    ``window`` x ``window`` cells differ least in colour (mean absolute difference): the flow back, by block matching.
    Parameter-free and in whole cells: the test it serves tells a flow off by a mover's speed from a right one."""
    k = 2 * radius + 1
    shifted = replicate_pad(prev, [radius] * 4).unfold(-2, cur.shape[-2], 1).unfold(-2, cur.shape[-1], 1)
    costs = box_mean((shifted - cur[:, :, None, None]).abs().mean(1).flatten(1, 2), window)  # (B, k², h, w)
    best = costs.argmin(1)
    return torch.stack([best % k - radius, best // k - radius], 1).to(cur.dtype)


def fill_occluded(flow: Tensor, prev: Tensor, occluded: Tensor, offsets: list[tuple[int, int]], rounds: int) -> Tensor:
    """``flow`` with each ``occluded`` cell's replaced by that of its neighbour at ``offsets`` most like it in colour
    in ``prev`` among those not occluded; a filled cell counts as not occluded in the next of ``rounds`` rounds."""
    for _ in range(rounds):
        around = neighbours(torch.cat([flow, prev, occluded.to(flow.dtype)], 1), offsets)
        candidates, colours, blocked = around.split([2, prev.shape[1], 1], 2)
        unlike = (colours - prev.unsqueeze(1)).abs().mean(2).masked_fill(blocked.squeeze(2) > 0, float("inf"))
        nearest, index = unlike.min(1, keepdim=True)
        taken = occluded & nearest.isfinite()
        flow, occluded = torch.where(taken, _chosen(candidates, index), flow), occluded & ~taken
    return flow


class FlowPropagation(nn.Module):
    """[flow, frames, ...] -> the same tensor with each pixel's flow replaced by a distant neighbour's where that
    explains the pair clearly better (module docstring).

    It decides on the coarsest level's own grid, 1/``factor``, where ``steps`` and ``window`` count cells (1, 2 and 4
    cells of 8 px: neighbours 8, 16 and 32 px away; a 24 px window), and the change is brought back to full
    resolution as it is, cell by cell. Then cells whose flow fails the forward-backward test by more than
    ``tolerance`` cells plus ``relative`` times its length take a consistent neighbour's (module docstring); the flow
    back is searched ±``reach`` cells (48 px: the coarsest level's search and the propagation's steps bring a flow
    that far). Deciding at full resolution cost 16 ms of a 128x96 learning step on one thread
    (81 -> 97 ms) for a flow no better (the frozen net on the generator's held-out clips: 1.085 over all pixels against
    1.088 at 1/8, before the test at the pixel itself came in; tree's hand 2.52 px where the reference is consistent,
    against 2.31); at 1/8 the forward takes 1.35 ms, 0.55 of them without the forward-backward test (exploratory)."""

    def __init__(
        self,
        factor: int = 8,
        steps: tuple[int, ...] = (1, 2, 4),
        window: int = 3,
        gain: float = 0.3,
        apart: float = 1.0,
        reach: int = 6,
        tolerance: float = 1.0,
        relative: float = 0.3,
        rounds: int = 2,
    ) -> None:
        super().__init__()
        self.offsets = [(d * s, e * s) for s in steps for d, e in ((1, 0), (-1, 0), (0, 1), (0, -1))]
        self.factor, self.window, self.gain, self.apart = factor, window, gain, apart / factor
        self.reach, self.tolerance, self.relative, self.rounds = reach, tolerance, relative, rounds

    def forward(self, x: Tensor) -> Tensor:
        f = self.factor
        with torch.no_grad():
            flow = F.avg_pool2d(x[:, :2], f) / f
            candidates = neighbours(flow, self.offsets)  # (B, K, 2, h, w)
            prev, cur = F.avg_pool2d(frames_of(x), f).split(3, 1)
            tried = torch.cat([flow.unsqueeze(1), candidates], 1)  # its own flow first
            cells = candidate_errors(prev, cur, tried)  # each flow's error per cell
            own, others = box_mean(cells, self.window).split([1, candidates.shape[1]], 1)
            close = (candidates - flow.unsqueeze(1)).square().sum(2) <= self.apart**2
            best, index = others.masked_fill(close, float("inf")).min(1, keepdim=True)
            better_here = cells[:, 1:].gather(1, index) < cells[:, :1]
            swapped = torch.where((best < (1 - self.gain) * own) & better_here, _chosen(candidates, index), flow)
            back = backward_flow(prev, cur, self.reach, self.window)
            mismatch = flow_lengths(swapped + warp(back, swapped))
            occluded = mismatch > self.tolerance + self.relative * flow_lengths(swapped)
            change = fill_occluded(swapped, prev, occluded, self.offsets, self.rounds) - flow
        return torch.cat([x[:, :2] + F.interpolate(change, scale_factor=f) * f, x[:, 2:]], 1)
