"""A flickering light's change from frame to frame, taken out of the pair the net is shown.

Why: under a light that flickers against the frame rate the picture's gain swings from frame to frame and a darker
band rolls down it (a rolling shutter). The net brings the second frame to the first one's exposure with one gain
for the whole picture (``models.exposure.match_exposure``), so the band's rows read as motion: real clips made so
(``bench.realflow --shift flicker``) cost the net as shipped 1.0-6.5 px over all pixels where as filmed they cost
0.03-0.29, and far more than Farneback or DIS-fast (bench/results/shifted-clips/). Brought to the second frame's light
row by row (``light_change``: the second frame warped back by the newest flow shown, over the first, a gain per row),
the first frame no longer differs from it by the band: the frozen net over box.mp4's first 150 pairs made to flicker
went from 5.5 to 0.04 px, tree.avi's from 4.2 to 0.49, carphone's from 1.08 to 0.33
(docs/notebook/2026-12-06-real-footage-through-the-camera-shifts.md). Taken where nothing flickers, the same
correction cost tree.avi as filmed 19 % (its fast hand, where the newest flow is wrong, changes its rows' light), so
a stream is corrected only where its light reads as flickering: the median row's change of light, a running mean
over its pairs, past ``FLICKERING``. The benchmark's flickering streams and clips read 0.11-0.43 a pair; every other
stream and clip at most 0.034 (p90), most under 0.01.

Tensor ops on the pair's device; the decision whether to correct at all is read on the host after ``FIRST_DECISION``
pairs (a flicker's first pairs are its worst: the band reads as motion) and then every ``READ_EVERY``, as a starved
codec's is (``models.block_codec``), so a stream that does not flicker is shown as it was, bit for bit.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .block_codec import READ_EVERY
from .known_motion import light_change

#: The newest pair's reading weighs this much in the running mean (its light is read on every pair: a warp and the
#: rows' means, a fraction of a millisecond at 160x120 on one CPU thread).
READING_WEIGHT = 0.25
#: The host first decides after this many pairs, then every ``READ_EVERY``.
FIRST_DECISION = 3
#: A stream flickers where its median row's change of light (``|log gain|``) reads past this on average.
FLICKERING = 0.08


class StreamFlicker:
    """How much the stream's light changes from frame to frame (module docstring): a running mean of the median row's
    ``|log light_change|`` over its real pairs from none (0-d tensor on their device); ``flickering``, read on the host
    after ``FIRST_DECISION`` pairs and then every ``READ_EVERY``: whether its pairs are brought to one light (False
    before)."""

    def __init__(self) -> None:
        self.reading: Tensor | None = None
        self.pairs = 0
        self.flickering = False
        self._gain = torch.ones(())

    def observe(self, pair: Tensor, flow: Tensor) -> None:
        """Read the real ``pair`` (1, 6, H, W) under ``flow`` (1, 2, H, W), the newest flow shown; decide on the host
        where its turn came."""
        self.pairs += 1
        self._gain = light_change(pair, flow)
        reading = self._gain.log().abs().median()
        if self.reading is None or self.reading.device != pair.device:
            self.reading = torch.zeros_like(reading)  # from no flicker, so that one pair alone does not decide
        self.reading = torch.lerp(self.reading, reading, READING_WEIGHT)
        if self.pairs == FIRST_DECISION or self.pairs % READ_EVERY == 0:
            self.flickering = bool(self.reading > FLICKERING)

    def __call__(self, pair: Tensor) -> Tensor:
        """``pair`` as the net is shown it: where the light flickers, its first frame brought to the second one's light
        row by row (clipped as a camera clips), else itself. Its gain is the last ``observe``'s, of this pair."""
        if not self.flickering:
            return pair
        return torch.cat([(pair[:, :3] * self._gain).clamp(0.0, 1.0), pair[:, 3:]], 1)
