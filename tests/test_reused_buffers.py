"""A streaming caller refills the same input and target tensors for every frame. The pipeline reads a target
D-1 or more steps after it was fed (when its frame's loss comes), so it must keep copies, on every runtime and
under every schedule: fed through reused buffers, the results must equal a run fed fresh tensors, to the bit."""

from __future__ import annotations

import functools

import pytest
import torch
from torch import nn

from pipeline_core import Pipeline
from pipeline_core.schedules import CDPv1, CDPv2, GPipe, Hybrid

STEPS = 16
BATCH = 4  # splits into the micro-batches of gpipe and cdp at D = 2 and 4

pytestmark = pytest.mark.usefixtures("one_intra_op_thread")


def make_model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Sequential(nn.Linear(5, 5), nn.Tanh()) for _ in range(4)], nn.Linear(5, 3))


def mse(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return (out - target).pow(2).mean()


def frames() -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    gen = torch.Generator().manual_seed(3)
    return [torch.rand(BATCH, 5, generator=gen) for _ in range(STEPS)], [
        torch.rand(BATCH, 3, generator=gen) for _ in range(STEPS)
    ]


def fed_fresh(pipe: Pipeline) -> list:
    xs, ys = frames()
    return [pipe.step(x.clone(), y.clone()) for x, y in zip(xs, ys, strict=True)] + pipe.flush()


def fed_through_one_buffer(pipe: Pipeline) -> list:
    xs, ys = frames()
    x_buf, y_buf = torch.empty_like(xs[0]), torch.empty_like(ys[0])
    results = []
    for x, y in zip(xs, ys, strict=True):
        x_buf.copy_(x)
        y_buf.copy_(y)
        results.append(pipe.step(x_buf, y_buf))
    x_buf.fill_(float("nan"))  # whatever still reads the buffers after the last step would now see NaN
    y_buf.fill_(float("nan"))
    return results + pipe.flush()


def outcome(pipe: Pipeline, feed) -> tuple[dict, dict]:
    results = feed(pipe)
    losses = {r.frame: r.loss for r in results if r.loss is not None}
    weights = {k: v.clone() for k, v in pipe.module().state_dict().items()}
    return losses, weights


SCHEDULES = {
    "partime": lambda d: "partime",
    "sequential": lambda d: "sequential",
    "stash": lambda d: "stash",
    "hybrid": lambda d: Hybrid(d, hybrid_after=6),
    "gpipe": lambda d: GPipe(d, chunks=d),
    "cdp-v1": lambda d: CDPv1(d),
    "cdp-v2": lambda d: CDPv2(d),
}
WHOLE_FRAMES = ("partime", "sequential", "stash", "hybrid")  # what runtime="processes" runs


def cases():
    for name in SCHEDULES:
        for depth in (2, 4):
            yield pytest.param(name, depth, "local", id=f"{name}-D{depth}-local")
    for name in WHOLE_FRAMES:
        yield pytest.param(name, 2, "processes", id=f"{name}-D2-processes", marks=pytest.mark.slow)


@pytest.mark.parametrize("name,depth,runtime", list(cases()))
def test_reused_buffers_give_the_same_results_as_fresh_tensors(name, depth, runtime):
    optimizer = functools.partial(torch.optim.SGD, lr=0.1, momentum=0.9)
    got = {}
    for feed in (fed_fresh, fed_through_one_buffer):
        with Pipeline(
            make_model(),
            torch.zeros(BATCH, 5),
            stages=depth,
            balance=[2, 1, 1, 1] if depth == 4 else [3, 2],
            loss_fn=mse,
            optimizer=optimizer,
            schedule=SCHEDULES[name](depth),
            runtime=runtime,
        ) as pipe:
            got[feed.__name__] = outcome(pipe, feed)
    (fresh_losses, fresh_weights), (reused_losses, reused_weights) = got["fed_fresh"], got["fed_through_one_buffer"]
    assert len(fresh_losses) == STEPS
    assert reused_losses == fresh_losses
    for key, value in fresh_weights.items():
        assert torch.equal(reused_weights[key], value), key
