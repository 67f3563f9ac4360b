"""A small conv net, a stream of inputs and targets, and the checks the engine's tests share (tests/test_pipeline.py,
tests/test_shown_samples.py)."""

from __future__ import annotations

import torch
from torch import nn

from pipeline_core import Pipeline

STEPS = 24
TOL = 1e-6


def make_model(layers: int = 4, width: int = 6) -> nn.Sequential:
    torch.manual_seed(0)
    blocks = [nn.Sequential(nn.Conv2d(3 if i == 0 else width, width, 3, padding=1), nn.Tanh()) for i in range(layers)]
    return nn.Sequential(*blocks, nn.Conv2d(width, 2, 3, padding=1))


def stream(n: int = STEPS):
    gen = torch.Generator().manual_seed(1)
    xs = [torch.rand(1, 3, 8, 8, generator=gen) for _ in range(n)]
    ys = [torch.rand(1, 2, 8, 8, generator=gen) for _ in range(n)]
    return xs, ys


def mse(out, target):
    return (out - target).pow(2).mean()


OPTIMIZERS = {
    "sgd": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
    "adam": lambda p: torch.optim.Adam(p, lr=1e-2),
}


def run(pipe: Pipeline, xs, ys):
    results = [pipe.step(x, y) for x, y in zip(xs, ys, strict=True)] + pipe.flush()
    outputs = {r.frame: r.output for r in results if r.frame is not None}
    losses = {r.frame: r.loss for r in results if r.frame is not None}
    return outputs, losses


def assert_close_dicts(a: dict, b: dict, tol: float = TOL) -> None:
    assert sorted(a) == sorted(b)
    for k in a:
        if isinstance(a[k], float):
            assert abs(a[k] - b[k]) <= tol, (k, a[k], b[k])
        else:
            torch.testing.assert_close(a[k], b[k], atol=tol, rtol=0)
