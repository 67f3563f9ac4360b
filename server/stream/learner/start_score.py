"""The frozen start's loss on one learned pair, computed a few layers at a time over the frames that follow it.

Why: on a CPU the start's forward is 30-60 ms at 128x96, most of a frame's 67 at 15 fps, beside stage processes
that already keep both cores busy; run whole on the frame it scores, it put that lump on one frame in every 10-30
(docs/notebook/2026-12-01-a-checkpoint-beside-the-frames.md), and running it on a thread beside the next step did not
help (the cores were busy). Its layers run in turn, as many each frame as fit the frame's share (``advance``), so the
work is spread over the frames between two scorings. The start's weights never change, so when its layers run does
not change its loss; the pair and its target are copied when the scoring begins, so later steps cannot change them
either. The judgments a stream's feed asks of its frozen start (``models.feeds.Feed.judgment``: whether its frames are
shown sharpened) ride on the scorings, run first through the whole start in the same turns, and keep a share of the
frames' time of their own (``StartScorer``): at 128x96 on 2 CPU cores a judgment cost 185 ms against a scoring's 60
(both on a loaded core), and a judgment on every scoring cost the service a frame at 15 fps in 60 s (none since).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .versus_start import BUDGET_SHARE, MOST_EVERY, VersusStart


@dataclass(frozen=True)
class Judging:
    """A judgment of the stream's feed (``Feed.judgment``) for the start's scoring to run first: ``net`` (the whole
    frozen start) on ``pairs``, its flows then to ``judged`` (``Feed.judged``)."""

    net: nn.Sequential
    pairs: Tensor
    judged: Callable[[Tensor], None]


class StartScore:
    """One scoring under way: ``layers`` (the frozen start's learned part) run on ``x`` in turn, then ``loss_fn``
    against ``target``; ``seconds`` it has taken so far. A ``judging`` runs before, its layers in the same turns."""

    def __init__(
        self,
        layers: nn.Sequential,
        x: Tensor,
        target: Tensor,
        loss_fn: Callable[[Tensor, Tensor], Tensor],
        judging: Judging | None = None,
    ) -> None:
        self.x, self.target = x.detach().clone(), target.detach().clone()
        # Each run: the layers still to run, what they run on, and what takes the last one's output.
        self.runs: list[tuple[list[nn.Module], Tensor, Callable[[Tensor], None]]] = []
        if judging is not None:
            self.runs.append((list(judging.net), judging.pairs.detach().clone(), judging.judged))
        self.runs.append((list(layers), self.x, lambda h: setattr(self, "loss", loss_fn(h, self.target))))
        self._in_judgment = judging is not None  # whether the run under way is the judgment
        self.seconds = 0.0
        self.judging_s = 0.0  # of ``seconds``, the judgment's
        self.loss: Tensor | None = None

    def advance(self, share_s: float) -> Tensor | None:
        """Run layers until ``share_s`` seconds have gone (one at least); the loss (0-d, on the pair's device) once the
        last has run, else None."""
        began = time.perf_counter()
        with torch.no_grad():
            while self.loss is None:
                layer_began = time.perf_counter()
                todo, h, then = self.runs[0]
                if todo:
                    h = todo.pop(0)(h)
                    self.runs[0] = (todo, h, then)
                if not todo:
                    then(h)
                    self.runs.pop(0)
                if self._in_judgment:
                    self.judging_s += time.perf_counter() - layer_began
                    self._in_judgment = bool(todo)
                if self.loss is None and time.perf_counter() - began >= share_s:
                    break
        self.seconds += time.perf_counter() - began
        return self.loss


@dataclass
class Scoring:
    """A scoring begun on the ``fed``-th pair, and the learner's loss on that pair once its frame is out."""

    score: StartScore
    fed: int
    frame: int | None = None
    learned: float | None = None


class StartScorer:
    """When the frozen start scores a pair (``versus``: every ten frames or further apart) and how much of it runs on
    each frame: the scorings' cost so far spread over the frames between two (``share_s``, seconds a frame), a layer
    at least, so that one scoring ends about when the next is due. Whether a scoring may carry the feed's judgment:
    judgments keep a share of their own, ``BUDGET_SHARE`` of a frame's time as the scorings do (a judgment is four
    forwards of the whole start, about three scorings' worth), so they come further apart than the scorings."""

    def __init__(self, versus: VersusStart, frame_s: Callable[[], float]) -> None:
        self.versus, self.frame_s = versus, frame_s  # a frame's time now (ΔS, as the budget keeps it)
        self.fed = 0  # pairs fed to the learner
        self.under_way: Scoring | None = None
        self.share_s = 0.0  # the last scoring's seconds over the frames up to the next: the budget's steady share
        self.judge_from = 0  # the pair fed from which a scoring may carry a judgment
        self.judging_share_s = 0.0  # the last judgment's seconds over the frames up to the next one allowed

    def after_step(
        self, begin: Callable[[bool], StartScore], learns: bool = True
    ) -> tuple[Scoring | None, Scoring | None, float]:
        """After a step: the scoring begun on its pair by ``begin`` (``Learner.start_score``, told whether it may carry
        a judgment) where one is due and the step ``learns`` from its pair (a pair known nowhere scores 0 for both; or
        None), the scoring that ended on this frame (or None; its loss in ``score.loss``), and the seconds its layers
        took here."""
        self.fed += 1
        begun = None
        if self.under_way is None:
            if not learns or not self.versus.due(self.fed):
                return None, None, 0.0
            begun = self.under_way = Scoring(begin(self.fed >= self.judge_from), self.fed)
        scoring = self.under_way
        before = scoring.score.seconds
        done = scoring.score.advance(self.share_s) is not None
        spent_s = scoring.score.seconds - before
        if not done:
            return begun, None, spent_s
        judging_s, frame_s = scoring.score.judging_s, self.frame_s()
        cost_s = scoring.score.seconds - judging_s
        if judging_s > 0:
            every = math.ceil(judging_s / (BUDGET_SHARE * frame_s)) if frame_s > 0 else MOST_EVERY
            self.judge_from, self.judging_share_s = scoring.fed + every, judging_s / every
        self.share_s = cost_s / self.versus.scored(scoring.fed, cost_s, frame_s) + self.judging_share_s
        self.under_way = None
        return begun, scoring, spent_s

    def cancel(self) -> None:
        """The weights the scoring's pair was learned with were left (``go_back_to_best``, a non-finite loss): its
        comparison would count against the weights now learning."""
        self.under_way = None
