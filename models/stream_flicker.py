"""A flickering light's change from frame to frame, taken out of the pair the net is shown.

Why: under a light that flickers against the frame rate the picture's gain swings from frame to frame and a darker
band rolls down it (a rolling shutter). The net brings the second frame to the first one's exposure with one gain
for the whole picture (``models.exposure.match_exposure``), so the band's rows read as motion: real clips made so
(``bench.realflow --shift flicker``) cost the net as shipped 1.0-6.5 px over all pixels where as filmed they cost
0.01-0.29, and far more than Farneback or DIS-fast (bench/results/shifted-clips/). Brought to the second frame's light
row by row (``light_change``: the second frame warped back by the newest flow shown, over the first, a gain per row),
the first frame no longer differs from it by the band: the frozen net over box.mp4's first 150 pairs made to flicker
went from 5.5 to 0.04 px, tree.avi's from 4.2 to 0.49, carphone's from 1.08 to 0.33
(docs/notebook/2026-12-06-real-footage-through-the-camera-shifts.md). Taken where nothing flickers, the same
correction cost tree.avi as filmed 19 % (its fast hand, where the newest flow is wrong, changes its rows' light), so
a stream is corrected only where its light reads as flickering: the median row's change of light, its median over
the last ``WINDOW`` pairs past ``FLICKERING``. The benchmark's flickering streams and clips read 0.11-0.43 a pair
(p10-p90); over such a window the other streams and clips, as filmed, hand-held, at night, blurred, coded and in false
colour, at most 0.072 (hand-held bikes.mp4). A learner split into two stages is handed each pair's flow a step later,
so its newest flow is two pairs old; there each row's light is read under it or standing still, whichever aligns the
row better (``light_change_or_still``).

Tensor ops on the pair's device; the decision whether to correct at all is read on the host after ``FIRST_DECISION``
pairs (a flicker's first pairs are its worst: the band reads as motion) and then every ``READ_EVERY``, as a starved
codec's is (``models.block_codec``), so a stream that does not flicker is shown as it was, bit for bit.
"""

from __future__ import annotations

from collections import deque

import torch
from torch import Tensor

from .block_codec import READ_EVERY
from .flow_loss import warp
from .known_motion import light_change, over_light_rows
from .luma import luma

#: The stream's reading is the median of its last this many pairs' (each pair's light is read: a warp and the rows'
#: means, a fraction of a millisecond at 160x120 on one CPU thread): a flicker reads high on most pairs, a cut the
#: scene-cut test missed or a burst of fast motion on one or two.
WINDOW = 9
#: The host first decides after this many pairs, then every ``READ_EVERY``.
FIRST_DECISION = 3
#: A stream flickers where its median row's change of light (``|log gain|``) reads past this over that window.
FLICKERING = 0.12


def light_change_or_still(pair: Tensor, flow: Tensor) -> Tensor:
    """(1, 1, H, 1): each row's change of light as ``light_change`` reads it (the rows' means of the pair's second
    frame, warped back, over its first), under ``flow`` or under no motion, whichever leaves the row less of a residual
    once its gain is taken out (the mean of ``|second - gain x first|``).

    Why: a pipeline of two stages hands the feed each pair's flow a step later, so the newest flow is two pairs old
    where a sequential learner's is one, and wherever the motion changed since, it misaligns the rows: D = 1 with its
    flow so held back lost as much as D = 2 (colorwheel's flickering stream 1.052, D = 2 1.055). Standing still then
    aligns some rows better (real clips made to flicker, the frozen net under such a flow: box.mp4's first 30 pairs
    0.167 px against 0.228, tree.avi 0.620 against 0.650 over the whole clip). Under the newest flow of D = 1 the same
    choice lost (colorwheel 0.959 against 0.934, carphone 0.325 against 0.318):
    docs/notebook/2026-12-06-night-leads-and-d-2s-older-flow-under-flicker.md."""
    prev = luma(pair[:, :3])
    cur = torch.cat([luma(warp(pair[:, 3:6], flow)), luma(pair[:, 3:6])])
    gains = cur.mean(-1, keepdim=True) / prev.mean(-1, keepdim=True).clamp_min(1e-3)
    residuals = (cur - gains * prev).abs().mean(-1, keepdim=True)
    return over_light_rows(torch.where(residuals[:1] <= residuals[1:], gains[:1], gains[1:]))


class StreamFlicker:
    """How much the stream's light changes from frame to frame (module docstring): each real pair's median row's
    ``|log light_change|`` (0-d tensors on their device), the last ``WINDOW`` of them kept; ``flickering``, read on the
    host after ``FIRST_DECISION`` pairs and then every ``READ_EVERY``: whether their median passes ``FLICKERING`` and
    the pairs are brought to one light (False before). ``stages``: the learner's pipeline's; where it hands the feed a
    flow older than the pair before's, the pair is brought to one light by ``light_change_or_still``."""

    def __init__(self, stages: int = 1) -> None:
        self.readings: deque[Tensor] = deque(maxlen=WINDOW)
        self.pairs = 0
        self.flickering = False
        self._older_flow = stages > 1
        self._gain = torch.ones(())

    def observe(self, pair: Tensor, flow: Tensor) -> None:
        """Read the real ``pair`` (1, 6, H, W) under ``flow`` (1, 2, H, W), the newest flow shown; decide on the host
        where its turn came."""
        self.pairs += 1
        self._gain = light_change(pair, flow)
        self.readings.append(self._gain.log().abs().median())
        if self.pairs == FIRST_DECISION or self.pairs % READ_EVERY == 0:
            self.flickering = bool(self.reading > FLICKERING)
        if self.flickering and self._older_flow:
            self._gain = light_change_or_still(pair, flow)

    @property
    def reading(self) -> Tensor:
        """(0-d) The median of the last ``WINDOW`` pairs' readings (0 before any)."""
        if not self.readings:
            return torch.zeros(())
        return torch.stack([r.to(self.readings[-1].device) for r in self.readings]).median()

    def __call__(self, pair: Tensor) -> Tensor:
        """``pair`` as the net is shown it: where the light flickers, its first frame brought to the second one's light
        row by row (clipped as a camera clips), else itself. Its gain is the last ``observe``'s, of this pair."""
        if not self.flickering:
            return pair
        return torch.cat([(pair[:, :3] * self._gain).clamp(0.0, 1.0), pair[:, 3:]], 1)
