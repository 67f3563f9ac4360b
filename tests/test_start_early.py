"""Stage processes started early (``Pipeline(start_early=True)``): the stages after the first begin the next step
while the host prepares its frame. They run the same actions in the same order, so every output, loss and weight is
the one the pipeline computes without it; calls between steps (state dicts, rates, loads) wait for the early part
and do not hang; and a schedule says so only where its later stages' next step does not depend on the next frame."""

from __future__ import annotations

import functools

import pytest
import torch
from torch import nn

from pipeline_core import Pipeline
from pipeline_core.schedules import SCHEDULES, make_schedule

TOL = 1e-6

pytestmark = pytest.mark.usefixtures("one_intra_op_thread")


def loss_fn(out: torch.Tensor, target: torch.Tensor | None) -> torch.Tensor:
    return out.pow(2).mean() if target is None else (out - target).pow(2).mean()


def make_model(layers: int) -> nn.Sequential:
    torch.manual_seed(0)
    convs = [nn.Sequential(nn.Conv2d(3 if i == 0 else 6, 6, 3, padding=1), nn.Tanh()) for i in range(layers - 1)]
    return nn.Sequential(*convs, nn.Conv2d(6, 2, 3, padding=1))


def pipeline(stages: int, start_early: bool) -> Pipeline:
    return Pipeline(
        make_model(2 * stages),
        torch.rand(1, 3, 8, 8),
        balance=[2] * stages,
        loss_fn=loss_fn,
        optimizer=functools.partial(torch.optim.Adam, lr=1e-2),
        runtime="processes",
        start_early=start_early,
    )


def drive(pipe: Pipeline, steps: int, load: dict | None = None) -> tuple[list, list[dict], dict]:
    """Steps with targets on even frames, and between some of them what the service asks between frames: state
    dicts (its best weights, a checkpoint), and a load with a new rate (going back to its best weights: a new epoch;
    ``load``, else the first state dict taken). Returns every result, the state dicts taken after steps 6 and 7, and
    the final state after the flush."""
    gen = torch.Generator().manual_seed(1)
    results, taken = [], []
    for i in range(steps):
        x = torch.rand(1, 3, 8, 8, generator=gen)
        y = torch.rand(1, 2, 8, 8, generator=gen) if i % 2 == 0 else None
        results.append(pipe.step(x, y))
        if i in (6, 7):
            taken.append(pipe.state_dict())
        if i == 13:
            pipe.load_state_dict(load or taken[0])
            pipe.set_lr(5e-3)
    results += pipe.flush()
    return results, taken, pipe.state_dict()


def weights(state: dict, stage: int) -> dict:
    return state["stages"][stage]["module"]


def same(a: dict, b: dict) -> bool:
    return all(torch.allclose(a[k], b[k], atol=TOL, rtol=0) for k in a)


@pytest.mark.parametrize("stages", [2, 3])
def test_stages_started_early_compute_what_they_compute_when_sent_with_the_frame(stages):
    with pipeline(stages, start_early=False) as plain, pipeline(stages, start_early=True) as early:
        assert early.runtime.starts_early and not plain.runtime.starts_early
        want, want_taken, want_final = drive(plain, 20)
        got, got_taken, got_final = drive(early, 20, load=want_taken[0])
    assert [r.frame for r in got] == [r.frame for r in want]
    for g, w in zip(got, want, strict=True):
        if w.output is not None:
            assert torch.allclose(g.output, w.output, atol=TOL, rtol=0), g.frame
        if w.loss is not None:
            assert g.loss == pytest.approx(w.loss, abs=TOL)
    assert all(same(weights(got_final, h), weights(want_final, h)) for h in range(stages))
    # Between two steps the first stage holds the weights it holds without starting early; the later ones hold one
    # update more, those the plain pipeline's hold after the next step (``Pipeline``'s docstring says so).
    assert same(weights(got_taken[0], 0), weights(want_taken[0], 0))
    assert all(same(weights(got_taken[0], h), weights(want_taken[1], h)) for h in range(1, stages))
    assert not same(weights(got_taken[0], 1), weights(want_taken[0], 1))
    # A step lasts as long as its slowest stage, the one started early too.
    for results in (got[4:13], want[4:13]):  # full steps, before the load starts afresh
        step = sum(r.step_seconds for r in results) / len(results)
        stage_means = [sum(r.stage_seconds[h] for r in results) / len(results) for h in range(stages)]
        assert all(0 < mean <= 1.05 * step for mean in stage_means), (step, stage_means)


def test_a_local_runtime_does_not_start_early():
    with pytest.raises(ValueError, match="runtime='processes'"):
        Pipeline(make_model(4), torch.rand(1, 3, 8, 8), balance=[2, 2], loss_fn=loss_fn, start_early=True)


@pytest.mark.parametrize("stages", [2, 3, 4])
def test_partimes_later_stages_do_the_same_whether_or_not_a_frame_is_fed(stages):
    """What ``later_stages_ahead`` claims: at every step the stages after the first do what they do whether the
    step is fed (``last_frame`` None) or the first one draining after the last frame fed (the frame before)."""
    schedule = make_schedule("partime", stages)
    assert schedule.later_stages_ahead
    for step in range(1, 4 * stages):
        fed, draining = (schedule.actions(step, last, learn=True)[1:] for last in (None, step - 1))
        assert fed == draining, step


@pytest.mark.parametrize("name", sorted(set(SCHEDULES) - {"partime"}))
def test_other_schedules_do_not_claim_it(name):
    assert not make_schedule(name, 2).later_stages_ahead
