"""The learner's loss beside its frozen start's on the same made pairs, and the check that keeps a stream from drifting
below where it began.

Every ``EVERY`` frames or more (``BUDGET_SHARE``) the learner's frozen start (the weights the stream began with)
scores what that frame's step learned from (``start_score.py``); the learner's own loss on it was computed before
it learned from it, so the two are comparable. Over the last ``WINDOW`` such frames, ``ratio`` = the learner's mean
loss / the start's. Where a full window's ratio is over ``1 + MARGIN`` the learner has fallen behind its start: the
stream goes back to its best weights (those it had when a full window last read its lowest ratio; the start's, before
any did) and says so in its notes. Why a window: one frame's loss varies by tens of per cent with its content, both
weights' alike. The pairs are the made ones (their flow is known), not the stream's own: at night and under heavy
compression their ratio reads a gain the stream's own flow does not have, and a window lost on the stream's own flow
goes unseen (docs/notebook/2026-12-04-what-the-made-pairs-gain-says-of-the-streams.md).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

#: Frames between two scorings by the frozen start, at least: its forward, one sample without a graph, is a share of a
#: frame's budget (``start_score.StartScorer`` runs its layers over the frames between).
EVERY = 10
#: The share of a frame's time the scorings may take on average (``VersusStart.scored``): where a scoring costs more,
#: they come further apart, up to ``MOST_EVERY`` frames. On 2 CPU cores at 128x96 and 15 fps one scoring took 40-45
#: ms, beside stage processes that already kept both cores busy, so every tenth frame it cost each frame 4-5 ms of
#: its 67 (docs/notebook/2026-11-30-where-a-cpu-frame-waits.md); a GPU's, a few ms, stay every tenth frame.
BUDGET_SHARE = 0.02
#: Frames between two scorings, at most: a window of ``WINDOW`` scorings then spans 300 frames (20 s at 15 fps).
MOST_EVERY = 30
#: Scorings per window, and how far over the start's loss a window's mean may go before the stream goes back.
WINDOW, MARGIN = 10, 0.02


@dataclass(frozen=True)
class Standing:
    """Where the learner stands against its start over the last window."""

    ratio: float  # the learner's mean loss over the start's
    learned: float
    start: float
    scored: int  # frames in the window


@dataclass(frozen=True)
class Verdict:
    """What a full window decided: ``behind`` (go back to the best weights) or ``best`` (keep these as the best)."""

    kind: str
    standing: Standing


class VersusStart:
    """The window of (learner's, start's) losses, and the decisions it leads to."""

    def __init__(self, every: int = EVERY, window: int = WINDOW, margin: float = MARGIN) -> None:
        self.least_every = every
        self.next = every  # the pair fed that the start scores next
        self.pairs: deque[tuple[float, float]] = deque(maxlen=window)
        self.margin = margin
        self.best: float | None = None  # the lowest full-window ratio so far

    def due(self, fed: int) -> bool:
        """Whether the frozen start scores the ``fed``-th pair."""
        return fed >= self.next

    def scored(self, fed: int, cost_s: float, frame_s: float) -> int:
        """The start scored the ``fed``-th pair in ``cost_s``: the next scoring as many frames on as keep the scorings
        within ``BUDGET_SHARE`` of a frame's ``frame_s`` (``every`` at least, ``MOST_EVERY`` at most); how many."""
        wanted = math.ceil(cost_s / (BUDGET_SHARE * frame_s)) if frame_s > 0 else MOST_EVERY
        every = max(self.least_every, min(wanted, MOST_EVERY))
        self.next = fed + every
        return every

    def record(self, learned: float, start: float) -> None:
        """One scored frame, for ``standing`` alone."""
        self.pairs.append((learned, start))

    def add(self, learned: float, start: float) -> Verdict | None:
        """One scored frame; a verdict where a full window decides something."""
        self.record(learned, start)
        standing = self.standing()
        if standing is None or len(self.pairs) < (self.pairs.maxlen or 0):
            return None
        if standing.ratio > 1 + self.margin:
            self.pairs.clear()  # the weights it goes back to start a new window
            return Verdict("behind", standing)
        if self.best is None or standing.ratio < self.best:
            self.best = standing.ratio
            return Verdict("best", standing)
        return None

    def standing(self) -> Standing | None:
        if not self.pairs:
            return None
        learned = sum(p[0] for p in self.pairs) / len(self.pairs)
        start = sum(p[1] for p in self.pairs) / len(self.pairs)
        return Standing(learned / start if start > 0 else float("nan"), learned, start, len(self.pairs))
