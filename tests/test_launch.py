"""pipeline_core.launch: stages as torchrun ranks across "machines" (two torchrun agents on one host).

Two ``torchrun --nnodes 2`` invocations meet through a c10d rendezvous on 127.0.0.1; each runs one
rank. What they compute must equal the single-process pipeline on the same frames.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pipeline_core import Pipeline
from pipeline_core.launch import synthetic_frames
from testing.net import free_port

pytestmark = pytest.mark.realtime

FRAMES = 20
TOL = 1e-6
ROOT = Path(__file__).resolve().parents[1]


def loss_fn(out: torch.Tensor, target: torch.Tensor | None) -> torch.Tensor:
    return (out - target).pow(2).mean()


def halve_where_negative(out: torch.Tensor, grad: torch.Tensor, frames_apart: int) -> torch.Tensor:
    """A stale-gradient alignment (any that depends on the output will do): the ranks must apply it too."""
    return torch.where(out < 0, grad / frames_apart, grad)


def small_net(width: int = 6) -> torch.nn.Sequential:
    from torch import nn

    return nn.Sequential(
        nn.Sequential(nn.Conv2d(3, width, 3, padding=1), nn.Tanh()),
        nn.Sequential(nn.Conv2d(width, width, 3, padding=1), nn.Tanh()),
        nn.Conv2d(width, 3, 3, padding=1),
    )


@contextlib.contextmanager
def one_thread():
    """Like each rank (``threads: 1``): same kernels, same rounding."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def test_two_nodes_compute_what_one_process_computes(tmp_path):
    shape = [1, 3, 8, 8]
    config = {
        "model": "test_launch:small_net",
        "input_shape": shape,
        "loss": "test_launch:loss_fn",
        "align_stale_grad": "test_launch:halve_where_negative",
        "optimizer": "torch.optim:Adam",
        "optimizer_kwargs": {"lr": 0.01},
        "source_kwargs": {"frames": FRAMES, "shape": shape, "seed": 3, "targets": True},
        "balance": [2, 1],
        "seed": 5,
        "threads": 1,
        "timeout": 60,
        "output": str(tmp_path / "out"),
    }
    (tmp_path / "run.json").write_text(json.dumps(config))
    endpoint = f"127.0.0.1:{free_port()}"
    nodes = [
        subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1"]
            + ["--node-rank", str(node), "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint]
            + ["--log-dir", str(tmp_path / f"agent-{node}")]  # not a torchelastic_* folder left in /tmp
            + ["--max-restarts", "0", "-m", "pipeline_core.launch", "--config", str(tmp_path / "run.json")],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}"},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for node in (0, 1)
    ]
    logs = []
    try:
        for node in nodes:
            logs.append(node.communicate(timeout=180)[0])
    finally:
        for node in nodes:
            node.kill()
    assert all(node.returncode == 0 for node in nodes), "\n".join(logs)
    summary = [json.loads(line) for log in logs for line in log.splitlines() if line.startswith("{")]
    assert [s["frames"] for s in summary] == [FRAMES]  # printed once, by the last rank

    torch.manual_seed(config["seed"])
    model = small_net()
    frames = list(synthetic_frames(FRAMES, tuple(shape), seed=3, targets=True))
    optimizer = functools.partial(torch.optim.Adam, lr=0.01)
    kw = {"balance": [2, 1], "loss_fn": loss_fn, "optimizer": optimizer, "align_stale_grad": halve_where_negative}
    with one_thread(), Pipeline(model, frames[0][0], **kw) as pipe:
        results = [pipe.step(x, y) for x, y in frames] + pipe.flush()
        want_weights = pipe.module().state_dict()
    want = [r for r in results if r.frame is not None]

    got = torch.load(tmp_path / "out" / "results.pt")
    assert got["frames"] == [r.frame for r in want]
    for out, loss, r in zip(got["outputs"], got["losses"], want, strict=True):
        torch.testing.assert_close(out, r.output, atol=TOL, rtol=0)
        assert abs(loss - r.loss) <= TOL
    stages = [torch.load(tmp_path / "out" / f"stage{h}.pt")["module"] for h in range(2)]
    got_weights = {**stages[0], **stages[1]}
    assert got_weights.keys() == want_weights.keys()
    for name, weight in want_weights.items():
        torch.testing.assert_close(got_weights[name], weight, atol=TOL, rtol=0, msg=name)
