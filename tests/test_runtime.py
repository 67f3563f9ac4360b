"""The round-robin executor that CUDA uses, exercised on CPU: same results, and no hang."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pipeline_core import Action, Op, Pipeline, PipelineError
from pipeline_core.contracts import StepRecord


def model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 2))


def loss(out, target):
    return (out - target).pow(2).mean()


def run_round_robin(pipe: Pipeline, xs, ys) -> list[float]:
    """Drive the pipeline's schedule through ``enqueue`` (one host thread) instead of threads."""
    losses = []
    for t, (x, y) in enumerate(zip(xs, ys, strict=True)):
        pipe.runtime.feed("input", 0, t, x)
        pipe.runtime.feed("target", pipe.depth - 1, t, y)
        pipe.runtime.transport.step = t
        record = pipe.runtime.interpreter.record = StepRecord()
        pipe.runtime.enqueue(pipe.schedule.actions(t, None, learn=True))
        frame = pipe.schedule.output_frame(t)
        if frame in record.losses:
            losses.append(float(record.losses[frame]))
    return losses


@pytest.mark.parametrize("schedule", ["partime", "sequential"])
def test_round_robin_equals_stage_threads(schedule):
    gen = torch.Generator().manual_seed(2)
    xs = [torch.rand(3, 4, generator=gen) for _ in range(12)]
    ys = [torch.rand(3, 2, generator=gen) for _ in range(12)]
    kw = dict(balance=[2, 2, 1], loss_fn=loss, schedule=schedule)
    with Pipeline(model(), xs[0], **kw) as threaded, Pipeline(model(), xs[0], **kw) as robin:
        want = [r.loss for x, y in zip(xs, ys, strict=True) if (r := threaded.step(x, y)).loss is not None]
        got = run_round_robin(robin, xs, ys)
    assert got == pytest.approx(want, abs=1e-6)


def test_round_robin_reports_a_schedule_that_cannot_progress():
    with Pipeline(model(), torch.rand(3, 4), balance=[3, 2], loss_fn=loss) as pipe:
        stuck = [[Action(Op.RECV_GRAD, 0, 0)], []]  # a gradient nobody will ever send
        with pytest.raises(PipelineError, match="cannot progress"):
            pipe.runtime.enqueue(stuck)
