"""What learning bought, as the learner judges it: a window of the learner's losses beside its frozen start's."""

from __future__ import annotations

import pytest

from server.stream.learner.versus_start import VersusStart


def test_the_start_scores_every_tenth_pair():
    versus = VersusStart(every=10)
    assert [n for n in range(1, 41) if versus.due(n)] == [10, 20, 30, 40]


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
