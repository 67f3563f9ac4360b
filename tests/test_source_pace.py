"""The source's own pace: the time between the frames it sends, told apart from frames the worker skipped."""

from __future__ import annotations

import numpy as np
import pytest

from server.stream.learner.source_pace import LEAST, SPAN, SourcePace


def test_frames_the_worker_skipped_do_not_slow_the_pace_but_count_in_the_pair():
    seqs = [0, 1, 2, 6, 7, 8, 12, 13, 14, 15, 19, 20, 21, 22, 30, 31]  # a 10 fps source; the worker missed some
    pace = SourcePace()
    assert [pace.observe(seq / 10, seq) for seq in seqs] == [1, *np.diff(seqs)]
    assert pace.interval == pytest.approx(0.1)


def test_a_rate_resampled_from_another_is_read_at_its_mean():
    """25 fps kept at 10 fps: every second and third frame of the source, 0.12 and 0.08 s apart in turn."""
    times = np.cumsum([0.0] + [0.12, 0.08] * 12)
    pace = SourcePace()
    for seq, t in enumerate(times):
        pace.observe(float(t), seq)
    assert pace.interval == pytest.approx(0.1, rel=0.02)


def test_a_source_that_sends_fewer_frames_than_it_says_is_read_at_its_own_pace_past_a_stall():
    rng = np.random.default_rng(0)
    gaps = rng.uniform(0.35, 0.55, 30)
    gaps[12] = 3.5  # the source stalled once
    pace = SourcePace()
    for seq, t in enumerate(np.cumsum(gaps)):
        pace.observe(float(t), seq)
        if seq < SPAN + LEAST - 1:
            assert pace.interval is None  # too few frames yet
    assert 0.4 <= pace.interval <= 0.5
