"""A layer's readings (``Stage.readings``) reach the caller beside the output (``StepResult.readings``), whichever
runtime runs the stages, each step's its own (a layer rewrites its reading in place, and a result keeps it)."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

from pipeline_core import Pipeline

STEPS = 6


class Reads(nn.Module):
    """Passes its input on, and reads its mean (kept in place, as the still gate keeps its reading)."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
        self.register_buffer("mean", torch.zeros(()), persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        self.mean.copy_(x.detach().mean())
        return x

    def readings(self) -> dict[str, Tensor]:
        return {self.name: self.mean}


def make_model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(Reads("first"), nn.Conv2d(3, 3, 3, padding=1), nn.Tanh(), nn.Conv2d(3, 2, 1), Reads("last"))


def loss_fn(out: Tensor, target: Tensor | None) -> Tensor:
    return out.pow(2).mean()


@pytest.mark.usefixtures("one_intra_op_thread")
@pytest.mark.parametrize(("runtime", "balance"), [("local", None), ("local", [2, 3]), ("processes", [2, 3])])
def test_each_step_brings_what_its_layers_read(runtime, balance):
    """The last stage's layer read the output it put out; the first stage's read the frame fed. A stage process before
    the last may be a step behind: its readings then come with the next step's."""
    xs = [torch.rand(1, 3, 8, 8, generator=torch.Generator().manual_seed(i)) for i in range(STEPS)]
    optimizer = lambda p: torch.optim.SGD(p, lr=0.1)  # noqa: E731
    kw = {"balance": balance} if balance else {"stages": 1}
    with Pipeline(make_model(), xs[0], loss_fn=loss_fn, optimizer=optimizer, runtime=runtime, **kw) as pipe:
        results = [pipe.step(x) for x in xs]
    for t, r in enumerate(results):
        if r.output is not None:
            torch.testing.assert_close(r.readings["last"], r.output.mean())
        if "first" in r.readings:
            fed = [float(xs[s].mean()) for s in (t, t - 1) if s >= 0]
            assert float(r.readings["first"]) == pytest.approx(fed[0]) or (
                runtime == "processes" and float(r.readings["first"]) == pytest.approx(fed[-1])
            ), t
    came = sum("first" in r.readings for r in results[1:])
    assert came == STEPS - 1 or (runtime == "processes" and came >= (STEPS - 1) // 2), "every stage's readings come"


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_replayed_cuda_graph_brings_each_step_s_own_readings():
    """A graph replays into the layers' buffers: each result keeps a copy of its step's."""
    xs = [torch.rand(1, 3, 8, 8, generator=torch.Generator().manual_seed(i)).cuda() for i in range(3 * STEPS)]
    optimizer = lambda p: torch.optim.SGD(p, lr=0.1)  # noqa: E731
    with Pipeline(make_model(), xs[0], balance=[2, 3], devices=["cuda:0"], loss_fn=loss_fn, optimizer=optimizer,
                  cuda_graph=True) as pipe:  # fmt: skip
        results = [pipe.step(x) for x in xs]
    outputs = [r for r in results if r.output is not None]
    assert len(outputs) > 2 * STEPS
    for r in outputs:
        torch.testing.assert_close(r.readings["last"], r.output.mean())
