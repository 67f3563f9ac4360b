"""What learning bought, as the learner judges it: a window of the learner's losses beside its frozen start's."""

from __future__ import annotations

import pytest

from server.stream.learner.versus_start import MOST_EVERY, VersusStart


def test_a_cheap_start_scores_every_tenth_pair():
    versus = VersusStart(every=10)
    due = [n for n in range(1, 41) if versus.due(n) and versus.scored(n, 0.001, 1 / 30)]
    assert due == [10, 20, 30, 40]


def test_a_full_window_decides_the_best_weights_and_falling_behind():
    versus = VersusStart(window=3, margin=0.02)
    assert versus.add(0.9, 1.0) is None and versus.add(0.9, 1.0) is None  # not a full window yet
    best = versus.add(0.9, 1.0)
    assert best is not None and best.kind == "best" and best.standing.ratio == pytest.approx(0.9)
    assert versus.add(0.95, 1.0) is None  # worse than the best, not behind the start
    assert versus.add(1.01, 1.0) is None  # 0.953: still ahead
    behind = versus.add(1.2, 1.0)  # (0.95 + 1.01 + 1.2) / 3 = 1.053 > 1.02
    assert behind is not None and behind.kind == "behind" and behind.standing.ratio == pytest.approx(1.0533, 1e-3)
    assert versus.standing() is None  # a new window for the weights it goes back to


def test_within_the_margin_is_not_behind():
    versus = VersusStart(window=2, margin=0.02)
    versus.add(1.01, 1.0)
    verdict = versus.add(1.01, 1.0)
    assert verdict is not None and verdict.kind == "best"  # 1.01 is the best window yet, and within the margin


def test_a_dear_scoring_comes_further_apart_within_a_share_of_the_frames_time():
    """A scoring of 20 ms at 15 fps (67 ms a frame) would take 3 % of every frame's time every tenth frame: the next
    comes 15 frames on (2 %); a cheap one stays ten frames on; a dearer one no further than ``MOST_EVERY``."""
    versus = VersusStart(every=10)
    assert versus.scored(10, 0.020, 1 / 15) == 15 and not versus.due(24) and versus.due(25)
    assert versus.scored(25, 0.002, 1 / 15) == 10 and versus.due(35)
    assert versus.scored(35, 1.0, 1 / 15) == MOST_EVERY and versus.due(35 + MOST_EVERY)
