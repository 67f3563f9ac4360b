"""The largest learning size at which a stream's motion stays within the net's reach.

Why: the service's net searches a fixed number of pixels at whatever size it learns (its 1/8 level ±32 px, the
propagation's block matching ±48 px; ``models.flow_nets``), so the same motion needs twice the reach at twice the
size. On a GPU, where every size costs about the same, the frame budget alone learns at the picture's own size, and
there a fast hand outruns the search: tree.avi scaled to 640×480 errs 7.09 px on its moving pixels learned at that
size, 4.32 under this cap (docs/operations.md#why-the-motion-cap, every clip measured). Slow motion gains from the
larger size (box.mp4), so the size is capped only while the motion is fast.

The measure is the 99th percentile of a frame's flow speed, in long sides per frame of the stream (the same at every
size; a pair that spans frames the worker skipped is divided by their count). Down when two frames in a row are beyond
``REACH_PX`` at the current size, to the largest size where the faster of the two is within it; back up only after
``CALM_S`` in which every frame would have stayed within ``GROW_SHARE`` of it at the larger size (the flow at a capped
size is the better estimate of the motion). Never below ``floor_side``, the long side at which the picture has the
pixels the nets were made for (``sizing.made_for_side``: their pretraining, and the CPU's largest learning size): a
ladder that starts there is never capped.

Each move costs a rebuild, about 0.7 s of frames on a GPU (a new graph: bench.gpu's "first steps"), so neither a gap
nor a single frame moves the cap. A gap: frames skipped while a rebuild runs make the next pair span several frames
(a pair of box.mp4 8 frames apart reads 19 px at 640×480, one frame apart 1.6-2.5), which capped the size again and
again: one stream of box.mp4 on an H100 went through ten sizes with 217 of 894 frames dropped (docs/operations.md#gpus,
the third run). A single frame: a cut the cut detector misses (box.mp4's loop seam reads 71 px at 640×480), a flash;
a hand that is fast stays fast.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence

import numpy as np

from ..sizing import Size

REACH_PX = 12.0  # a frame's fast motion (99th percentile of its speed) kept within this at the learning size
GROW_SHARE = 0.5  # grow only where the recent motion would take at most this share of REACH_PX
CALM_S = 3.0  # ... over this long
QUANTILE = 99.0
SUBSAMPLE = 2  # every other pixel each way: the percentile of a quarter of the pixels, a quarter of the host's work


def speed(flow: np.ndarray) -> float:
    """A frame's fast motion in long sides per frame: the ``QUANTILE`` of the flow's speed over its long side."""
    sample = flow[::SUBSAMPLE, ::SUBSAMPLE]
    return float(np.percentile(np.hypot(sample[..., 0], sample[..., 1]), QUANTILE)) / max(flow.shape[:2])


class MotionCap:
    """Which sizes of ``ladder`` (largest first) keep the motion within reach: ``top``, the index of the largest."""

    def __init__(self, ladder: Sequence[Size], floor_side: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.ladder = list(ladder)
        self.floor = max((i for i, size in enumerate(self.ladder) if max(size) >= floor_side), default=0)
        self.clock = clock
        self.top = 0
        self.recent: deque[tuple[float, float]] = deque()  # (when, speed) over the last CALM_S
        self.since = clock()  # the last move of the cap: the calm that lets it grow counts from here
        self.last = 0.0  # the frame before's speed

    def observe(self, flow: np.ndarray, frames: int = 1) -> int:
        """A frame's flow (at the learning size, H x W x 2) from a pair ``frames`` frames of the stream apart; the
        index of the largest size now allowed."""
        if self.floor == 0:  # nothing below the largest size to cap to (the CPU's ladder): no host work per frame
            return 0
        now, fast = self.clock(), speed(flow) / max(1, frames)
        before, self.last = self.last, fast
        self.recent.append((now, fast))
        while self.recent[0][0] < now - CALM_S:
            self.recent.popleft()
        if min(fast, before) * max(self.ladder[self.top]) > REACH_PX:
            self._move(self._largest_within(max(fast, before), REACH_PX), now)
        elif self.top > 0 and now - self.since >= CALM_S:
            recent = max(s for _, s in self.recent)
            self._move(min(self.top, self._largest_within(recent, GROW_SHARE * REACH_PX)), now)
        return self.top

    def _largest_within(self, fast: float, reach_px: float) -> int:
        return next((i for i in range(self.floor) if fast * max(self.ladder[i]) <= reach_px), self.floor)

    def _move(self, top: int, now: float) -> None:
        if top != self.top:
            self.top, self.since = top, now
