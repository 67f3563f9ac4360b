"""The frozen start's scoring, a few layers a frame (``server.stream.learner.start_score``)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from server.stream.learner.start_score import StartScore, StartScorer
from server.stream.learner.versus_start import VersusStart


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


def test_given_time_enough_it_runs_whole():
    ran: list[int] = []
    score = StartScore(nn.Sequential(*(Slow(ran, i) for i in range(5))), torch.zeros(2), torch.zeros(2), mse)
    assert score.advance(math.inf) is not None and ran == [0, 1, 2, 3, 4]


class Learner:
    """As much of ``Learner`` as the scorer uses: a fresh scoring of three layers."""

    def __init__(self) -> None:
        self.ran: list[int] = []

    def start_score(self) -> StartScore:
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


def test_a_cancelled_scoring_never_comes_out():
    learner, scorer = Learner(), StartScorer(VersusStart(every=1), frame_s=lambda: 0.1)
    begun, done, _ = scorer.after_step(learner.start_score)
    assert begun is not None and done is None
    scorer.cancel()
    later = [scorer.after_step(learner.start_score) for _ in range(2)]
    assert all(d is not begun for _, d, _ in later)
