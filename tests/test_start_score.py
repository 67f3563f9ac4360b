"""The frozen start's scoring, a few layers a frame (``server.stream.learner.start_score``)."""

from __future__ import annotations

import math
import time

import pytest
import torch
from torch import nn

from server.stream.learner.start_score import Judging, StartScore, StartScorer
from server.stream.learner.versus_start import BUDGET_SHARE, VersusStart


class Slow(nn.Module):
    """A layer that adds one and records that it ran."""

    def __init__(self, ran: list[int], index: int) -> None:
        super().__init__()
        self.ran, self.index = ran, index

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.ran.append(self.index)
        return x + 1


def mse(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return ((out - target) ** 2).mean()


def test_its_layers_run_in_turn_one_at_least_each_time_and_its_loss_is_the_whole_forwards():
    ran: list[int] = []
    layers = nn.Sequential(*(Slow(ran, i) for i in range(4)))
    x, target = torch.zeros(3), torch.full((3,), 10.0)
    score = StartScore(layers, x, target, mse)
    x += 100  # the step's input changed after the scoring began: not what it scores
    assert [score.advance(0.0) for _ in range(3)] == [None, None, None] and ran == [0, 1, 2]
    loss = score.advance(0.0)
    assert ran == [0, 1, 2, 3] and loss is not None and float(loss) == pytest.approx(36.0)
    assert score.advance(0.0) is loss and ran == [0, 1, 2, 3]  # done: nothing runs again
    assert score.seconds > 0


def test_a_judging_runs_first_through_its_own_net_in_the_same_turns_and_leaves_the_loss_as_it_was():
    """The feed's judgment (``Feed.judgment``) runs through the whole start before the scoring's layers, a layer at
    least a turn as they do; its flows go to ``judged`` once its last layer has run, and the loss is the pair's."""
    ran: list[int] = []
    whole = nn.Sequential(*(Slow(ran, i) for i in range(10, 12)))
    judged: list[torch.Tensor] = []
    judging = Judging(whole, torch.arange(4.0), judged.append)
    score = StartScore(nn.Sequential(*(Slow(ran, i) for i in range(3))), torch.zeros(3), torch.full((3,), 10.0), mse,
                       judging)  # fmt: skip
    assert score.advance(0.0) is None and ran == [10] and not judged
    assert score.advance(0.0) is None and ran == [10, 11] and torch.equal(judged[0], torch.arange(4.0) + 2)
    loss = score.advance(math.inf)
    assert ran == [10, 11, 0, 1, 2] and loss is not None and float(loss) == pytest.approx(49.0) and len(judged) == 1


def test_given_time_enough_it_runs_whole():
    ran: list[int] = []
    score = StartScore(nn.Sequential(*(Slow(ran, i) for i in range(5))), torch.zeros(2), torch.zeros(2), mse)
    assert score.advance(math.inf) is not None and ran == [0, 1, 2, 3, 4]


class Learner:
    """As much of ``Learner`` as the scorer uses: a fresh scoring of three layers."""

    def __init__(self) -> None:
        self.ran: list[int] = []

    def start_score(self, judge: bool) -> StartScore:
        return StartScore(nn.Sequential(*(Slow(self.ran, i) for i in range(3))), torch.zeros(1), torch.zeros(1), mse)


def test_a_scoring_begins_when_due_runs_over_the_frames_after_it_and_the_next_waits_for_it():
    """One layer a frame before any scoring was timed; the next scoring is due ``every`` pairs after the last began,
    and none begins while one is under way; the steady share is the last scoring's time over the pairs between two."""
    learner, scorer = Learner(), StartScorer(VersusStart(every=2), frame_s=lambda: 0.1)
    steps = [scorer.after_step(learner.start_score) for _ in range(6)]
    begun = [i for i, (b, _, _) in enumerate(steps) if b is not None]
    done = [i for i, (_, d, _) in enumerate(steps) if d is not None]
    assert begun[0] == 1 and done[0] == 3  # the second pair fed; its three layers on it and the two frames after
    assert steps[3][1] is steps[1][0] and steps[3][1].fed == 2
    assert all(b is None for b, _, _ in steps[2:4])  # none begins while one is under way
    assert scorer.share_s > 0 and steps[0] == (None, None, 0.0)


class SlowLayer(nn.Module):
    """A layer that takes ``seconds``."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(self.seconds)
        return x


class Judged(Learner):
    """A learner whose feed always has a judgment to offer, ten times a scoring's cost."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[bool] = []
        self.judged: list[torch.Tensor] = []

    def start_score(self, judge: bool) -> StartScore:
        self.asked.append(judge)
        judging = Judging(nn.Sequential(SlowLayer(0.02)), torch.zeros(1), self.judged.append) if judge else None
        return StartScore(nn.Sequential(SlowLayer(0.002)), torch.zeros(1), torch.zeros(1), mse, judging)


def test_judgments_keep_a_budget_share_of_their_own_and_so_ride_on_fewer_scorings():
    """A frame of 0.1 s: a judgment of 0.02 s (more where the sleep runs over, on a loaded machine) may ride again only
    as many pairs later as keep it at 2 % of the frames' time (10 at 0.02 s), while the scorings keep their own spacing
    (every 2 here, further where a loaded machine's sleeps run over); both shares are counted in the steady share."""
    learner, scorer = Judged(), StartScorer(VersusStart(every=2), frame_s=lambda: 0.1)
    for _ in range(200):  # up to five scorings (pairs 2, 4, ..., 10 unloaded), none where a judgment may ride again
        if len(learner.asked) >= 5 or 0 < scorer.judge_from <= scorer.fed + 1:
            break
        scorer.after_step(learner.start_score)
    assert learner.asked[0] and not any(learner.asked[1:]) and len(learner.asked) >= 2 and len(learner.judged) == 1
    scorings = len(learner.asked)
    every = scorer.judge_from - 2
    judging_s = scorer.judging_share_s * every  # the judgment's own time, as the scorer measured it
    assert judging_s >= 0.02 and every == math.ceil(judging_s / (BUDGET_SHARE * 0.1)) >= 10
    assert scorer.share_s > scorer.judging_share_s
    while scorer.fed < scorer.judge_from + 1:
        scorer.after_step(learner.start_score)
    assert True in learner.asked[scorings:]  # a scoring from then on may judge again


def test_a_cancelled_scoring_never_comes_out():
    learner, scorer = Learner(), StartScorer(VersusStart(every=1), frame_s=lambda: 0.1)
    begun, done, _ = scorer.after_step(learner.start_score)
    assert begun is not None and done is None
    scorer.cancel()
    later = [scorer.after_step(learner.start_score) for _ in range(2)]
    assert all(d is not begun for _, d, _ in later)
