"""Frames sharpened before the net, where the net's own flow agrees with itself better on them.

Why: the shipped net gains from sharper frames where a picture holds little detail (blurred or not: an unsharp mask
took the frozen net to 0.79 of its error on moon's blurred stream, 0.76 on its clean one) and loses where it holds
much (detailed pictures 5-16 %, real clips up to 34 %), and neither a reading of the frames (their blur along the
flow against across it) nor the made pairs told the two apart
(docs/notebook/2026-12-06-frames-sharpened-for-a-blurred-stream.md). The stream's own pairs do, through the net
itself: a flow that is right both ways agrees with itself (the forward flow and the backward one read where it lands
add up to nothing), and over 100 pairs the frozen net's mean forward-backward disagreement on sharpened frames against
frames as they come fell below 0.95 only where sharpening lowered its error (0.76-0.99 of it), and stayed at 0.97-1.39
on every detailed picture and real clip, as filmed, hand-held and blurred
(docs/notebook/2026-12-07-the-nets-own-agreement-tells-when-sharpening-serves.md).

So every ``JUDGE_EVERY``-th pair the stream offers a judgment (``judgment``; the service takes one only as often as its
frame budget allows: ``server/stream/learner/start_score.py``): the pair as it comes and sharpened, each forward and
backward, for the stream's frozen start to run whole (the flow as it would show it: the flow before the still gate and
the refinement told the two apart less well); ``judged`` takes the four flows. Over the last ``JUDGMENTS`` judgments it
sharpens once the sharpened pairs' mean disagreement falls under ``STARTS_BELOW`` of the others', and stops where it
rises over ``STOPS_ABOVE``; both are judged through the frozen start whatever the stream shows, so a judgment does not
follow the stream's own choice. A night camera's pairs are smoothed instead (``models.stream_noise``), whatever the
judge says: sharpening would raise their noise.
"""

from __future__ import annotations

from collections import deque

import torch
from torch import Tensor

from .flow_loss import flow_lengths, in_frame_mask, warp
from .stream_noise import gaussian

#: The unsharp mask: ``frame + AMOUNT (frame - Gaussian(frame, SIGMA px))``; of the four tried (σ 1 and 2, amounts
#: 0.5-2), the one that served the blurred streams most (notebook of 2026-12-06).
SIGMA, AMOUNT = 1.0, 2.0
#: A judgment is offered every ``JUDGE_EVERY``-th pair until ``JUDGMENTS`` have come back, then every
#: ``JUDGE_LATER``-th (a judgment is four forwards of the whole net: the service's budget): the decision reads the last
#: ``JUDGMENTS`` (at first 100 pairs; over 20 the disagreement's ratio strayed across the threshold on streams where
#: sharpening does not serve).
JUDGE_EVERY, JUDGE_LATER, JUDGMENTS = 5, 50, 20
#: Sharpening starts where the sharpened pairs' mean disagreement is under this share of the pairs' as they come, and
#: stops where it is over ``STOPS_ABOVE``.
STARTS_BELOW, STOPS_ABOVE = 0.95, 1.0
#: Nor does it sharpen where the pairs as they come disagree by less than this (px, the window's mean): a scene that
#: stands still disagrees by the net's rounding (the generator's still clips 0.002-0.003 px, where the streams that
#: move read 0.07-0.25), and there the ratio of two such numbers chose sharpening for one that it cost 14 %.
LEAST_DISAGREEMENT = 0.02


def sharpened(pair: Tensor) -> Tensor:
    """``pair`` (B, 6, H, W) in [0, 1], both frames through the unsharp mask, kept in [0, 1]."""
    return (pair + AMOUNT * (pair - gaussian(pair, SIGMA))).clamp(0.0, 1.0)


def reversed_pair(pair: Tensor) -> Tensor:
    """``pair`` (B, 6, H, W) with its frames swapped: its backward flow's input."""
    return torch.cat([pair[:, 3:6], pair[:, :3]], 1)


def disagreement(forward: Tensor, backward: Tensor) -> Tensor:
    """(B,) The mean length of each ``forward`` flow (B, 2, H, W) plus its ``backward`` one read where it lands, over
    the pixels that land inside the picture: 0 where the two flows agree."""
    inside = in_frame_mask(forward)
    error = flow_lengths(forward + warp(backward, forward))
    return (error * inside).sum((1, 2, 3)) / inside.sum((1, 2, 3)).clamp_min(1.0)


class StreamSharpening:
    """Whether the stream's pairs are shown sharpened (module docstring): ``sharpens``, decided on the host as each
    judgment comes back (False until ``JUDGMENTS`` have)."""

    def __init__(self) -> None:
        self.pairs = 0
        self.offered: Tensor | None = None  # the pair of the newest judgment offered and not yet taken
        self.judgments: deque[Tensor] = deque(maxlen=JUDGMENTS)  # each (2,): as they come, sharpened
        self.sharpens = False

    def observe(self, pair: Tensor) -> None:
        """A real ``pair`` (1, 6, H, W) as it comes: the newest judgment offered where its turn came (the pair kept;
        the judgment is made when taken, as most offered in the service never are)."""
        self.pairs += 1
        if self.pairs % (JUDGE_EVERY if len(self.judgments) < JUDGMENTS else JUDGE_LATER) == 0:
            self.offered = pair

    def judgment(self) -> Tensor | None:
        """The newest judgment offered and not yet taken (4, 6, H, W: as it came forward and backward, sharpened
        forward and backward), for the frozen start to run; None if none is."""
        pair, self.offered = self.offered, None
        if pair is None:
            return None
        sharp = sharpened(pair)
        return torch.cat([pair, reversed_pair(pair), sharp, reversed_pair(sharp)])

    def judged(self, flows: Tensor) -> None:
        """The frozen start's flows (4, 2 or more, H, W) of a judgment: decide again."""
        flows = flows[:, :2].float()
        self.judgments.append(disagreement(flows[0::2], flows[1::2]))
        if len(self.judgments) < JUDGMENTS:
            return
        as_is, sharp = (float(v) for v in torch.stack(list(self.judgments)).sum(0))
        ratio = sharp / max(as_is, 1e-9)
        moves = as_is / len(self.judgments) >= LEAST_DISAGREEMENT
        self.sharpens = moves and (ratio < STARTS_BELOW if not self.sharpens else ratio <= STOPS_ABOVE)

    def __call__(self, pair: Tensor) -> Tensor:
        """``pair`` as the net is shown it: sharpened where the stream sharpens, else itself."""
        return sharpened(pair) if self.sharpens else pair
