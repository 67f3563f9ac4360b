"""Samples only shown (``Pipeline(shown=k)``): forwarded without a graph, and past the layers only they pass; the
pipeline learns from the others as one that keeps every graph, or has no such layer, does."""

from __future__ import annotations

import engine_reference as ref
import pytest
import torch
from pipeline_support import OPTIMIZERS, TOL, assert_close_dicts, make_model, mse, run, stream
from torch import nn

from pipeline_core import Pipeline

pytestmark = pytest.mark.usefixtures("one_intra_op_thread")


def last_sample_mse(out, target):
    """The loss of a batch whose leading samples are only shown: it reads the last one alone."""
    return (out[-1:] - target).pow(2).mean()


@pytest.mark.parametrize(("schedule", "balance"), [("sequential", [5]), ("partime", [3, 2]), ("partime", [2, 2, 1])])
@pytest.mark.parametrize("runtime", ["local", "processes"])
def test_shown_samples_go_forward_alone_and_the_pipeline_learns_as_from_the_rest(schedule, balance, runtime):
    """A batch's first sample only shown (forwarded without a graph): the same outputs, losses and weights as a
    pipeline that keeps the graph of every sample, whose loss reads the last one only."""
    xs, ys = stream(12)
    batches = [torch.cat([x, x.flip(-1)]) for x in xs]  # sample 0 shown, sample 1 learned from
    common = {"balance": balance, "loss_fn": last_sample_mse, "optimizer": OPTIMIZERS["adam"], "schedule": schedule}
    with Pipeline(make_model(), batches[0], **common) as whole:
        want = run(whole, batches, ys)
        want_weights = ref.weights(s.module for s in whole.stages)
    with Pipeline(make_model(), batches[0], shown=1, runtime=runtime, **common) as showing:
        got = run(showing, batches, ys)
        assert_close_dicts(got[0], want[0])
        assert_close_dicts(got[1], want[1])
        modules = [m for m in showing.runtime.modules()]
        for g, w in zip(ref.weights(modules), want_weights, strict=True):
            torch.testing.assert_close(g, w, atol=TOL, rtol=0)


class LastTouch(nn.Module):
    """A last touch to what is shown, with nothing to learn: only shown samples pass it."""

    only_shown = True

    def forward(self, x):
        return x + 1.0


@pytest.mark.parametrize(("schedule", "balance"), [("sequential", [6]), ("partime", [3, 3])])
@pytest.mark.parametrize("runtime", ["local", "processes"])
def test_the_samples_learned_from_go_by_the_layers_only_shown_ones_pass(schedule, balance, runtime):
    """With a last touch only shown samples pass, a pipeline learns (losses, weights, the learned samples' outputs)
    as one without it, and shows what that one shows, touched."""
    xs, ys = stream(12)
    batches = [torch.cat([x, x.flip(-1)]) for x in xs]
    common = {"loss_fn": last_sample_mse, "optimizer": OPTIMIZERS["adam"], "schedule": schedule, "shown": 1}
    with Pipeline(make_model(), batches[0], balance=[*balance[:-1], balance[-1] - 1], **common) as without:
        want = run(without, batches, ys)
        want_weights = ref.weights(s.module for s in without.stages)
    with Pipeline(nn.Sequential(*make_model(), LastTouch()), batches[0], balance=balance, runtime=runtime,
                  **common) as touching:  # fmt: skip
        got = run(touching, batches, ys)
        assert_close_dicts(got[1], want[1])
        assert_close_dicts(got[0], {f: torch.cat([out[:1] + 1.0, out[1:]]) for f, out in want[0].items()})
        for g, w in zip(ref.weights(touching.runtime.modules()), want_weights, strict=True):
            torch.testing.assert_close(g, w, atol=TOL, rtol=0)


def test_where_no_sample_is_only_shown_every_sample_passes_every_layer():
    model, (xs, ys) = nn.Sequential(*make_model(), LastTouch()), stream(1)
    want = model(xs[0]).detach()
    with Pipeline(model, xs[0], stages=1, loss_fn=mse, optimizer=OPTIMIZERS["sgd"], schedule="sequential") as pipe:
        torch.testing.assert_close(pipe.step(xs[0], ys[0]).output, want, atol=TOL, rtol=0)


def test_only_schedules_that_forward_each_input_whole_show_samples():
    xs, _ = stream(2)
    batch = torch.cat([xs[0], xs[0]])
    with pytest.raises(ValueError, match="only sequential, partime show"):
        Pipeline(make_model(), batch, balance=[3, 2], loss_fn=last_sample_mse, schedule="gpipe", shown=1)
    with pytest.raises(ValueError, match="must leave samples to learn from"):
        Pipeline(make_model(), batch, balance=[3, 2], loss_fn=last_sample_mse, shown=2)
