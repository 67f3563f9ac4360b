"""Stages run at the same time. Every equivalence test would also pass a runtime that ran the stages one after
another; this one would not: once the pipeline is full, a step must last about as long as its slowest stage, not as
long as all stages together. Stages that sleep show it on any machine (a ratio within one run, no absolute time)."""

from __future__ import annotations

import statistics

import pytest
import torch
from sleep_layers import Sleep
from torch import nn

from pipeline_core import Pipeline

pytestmark = pytest.mark.realtime

STEPS = 14
#: A step of a pipeline whose stages overlap lasts its slowest stage plus hand-over costs; run one after another
#: it would last the sum, here 1.5x (D = 2) to 2.25x (D = 3) the slowest stage.
MAX_RATIO = 1.3
STAGE_SLEEPS = {2: [0.02, 0.04], 3: [0.04, 0.02, 0.03]}


def loss_fn(out: torch.Tensor, target: torch.Tensor | None) -> torch.Tensor:
    return out.pow(2).mean()


@pytest.mark.parametrize("runtime", ["local", "processes"])
@pytest.mark.parametrize("depth", sorted(STAGE_SLEEPS))
def test_a_full_pipeline_step_lasts_its_slowest_stage_not_the_sum(depth, runtime):
    sleeps = STAGE_SLEEPS[depth]
    model = nn.Sequential(*[Sleep(s) for s in sleeps])
    with Pipeline(
        model, torch.ones(1, 4), balance=[1] * depth, loss_fn=loss_fn, schedule="partime", runtime=runtime
    ) as pipe:
        results = [pipe.step(torch.ones(1, 4)) for _ in range(STEPS)]
    full = results[2 * depth :]  # filled, and past the first steps' one-off costs
    steps = statistics.median(r.step_seconds for r in full)
    slowest = statistics.median(max(s for s in r.stage_seconds if s is not None) for r in full)
    assert slowest >= max(sleeps)  # the stages really did their work
    assert steps < MAX_RATIO * slowest, (
        f"D = {depth}, {runtime}: a step took {steps * 1e3:.1f} ms, the slowest stage {slowest * 1e3:.1f} ms, "
        f"all stages {sum(sleeps) * 1e3:.0f} ms"
    )


def test_a_stage_process_waiting_for_its_neighbour_is_not_busy():
    """A stage's time is its own work: the second stage, which waits each step for the slow first one's activation,
    reads as nearly idle, and the step as long as the first stage (``StepResult.step_seconds``)."""
    slow = 0.08
    model = nn.Sequential(Sleep(slow), Sleep(0.0))
    with Pipeline(model, torch.ones(1, 4), balance=[1, 1], loss_fn=loss_fn, runtime="processes") as pipe:
        results = [pipe.step(torch.ones(1, 4)) for _ in range(STEPS)]
    full = results[4:]
    first = statistics.median(r.stage_seconds[0] for r in full)
    second = statistics.median(r.stage_seconds[1] for r in full)
    assert first >= slow and second < slow / 4, (first, second)
    assert all(r.step_seconds >= max(r.stage_seconds) for r in full)
