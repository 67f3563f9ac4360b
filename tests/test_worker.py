"""The worker's learner: checkpoints (atomic, resumable, guarded) and recovery from a non-finite loss."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from models.online import frame_pair
from server import checkpoints
from server.worker import CheckpointMismatch, Learner, WorkerConfig


@pytest.fixture
def cfg(tmp_path) -> WorkerConfig:
    return WorkerConfig(name="unit", model="fast", stages=1, width=32, height=32, lr=1e-3, schedule="partime",
                        devices=None, checkpoint_path=tmp_path / "unit.pt", checkpoint_interval_s=60,
                        jpeg_quality=80)  # fmt: skip


def pairs(n: int):
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (n + 1, 32, 32, 3), dtype=np.uint8)
    return [frame_pair(frames[i], frames[i + 1]) for i in range(n)]


def weights(learner: Learner) -> list[torch.Tensor]:
    return [p.detach().clone() for p in learner.pipe.module().parameters()]


def test_checkpoint_is_atomic_and_resumes(cfg):
    learner = Learner(cfg)
    for x in pairs(3):
        assert learner.step(x) is not None
    assert learner.save() == 3
    assert [p.name for p in cfg.checkpoint_path.parent.iterdir()] == ["unit.pt"]  # no temp file left behind
    saved = weights(learner)
    learner.pipe.close()
    again = Learner(replace(cfg, lr=None))
    assert again.resumed_from == 3 and again.lr == pytest.approx(1e-3)
    assert all(torch.equal(a, b) for a, b in zip(saved, weights(again), strict=True))
    again.pipe.close()
    with pytest.raises(CheckpointMismatch):
        Learner(replace(cfg, width=64, height=64))


def test_stages_learn_at_rates_scaled_by_their_gradient_delay_also_after_a_resume(cfg):
    cfg = replace(cfg, stages=2, lr=4.5e-3)
    learner = Learner(cfg)
    lrs = [[g["lr"] for g in s.optimizer.param_groups] for s in learner.pipe.stages]
    assert lrs == [[pytest.approx(1.5e-3)], [pytest.approx(4.5e-3)]]  # PARTIME stage 0: gradients 2 frames stale
    for x in pairs(3):
        learner.step(x)
    learner.save()
    learner.pipe.close()
    halved = Learner(replace(cfg, lr=2.25e-3))  # a restart after a crash: the checkpoint's optimizer lrs must not win
    assert [g["lr"] for s in halved.pipe.stages for g in s.optimizer.param_groups] == [
        pytest.approx(7.5e-4),
        pytest.approx(2.25e-3),
    ]
    halved.pipe.close()


def test_nonfinite_loss_restores_checkpoint_and_halves_lr(cfg):
    learner = Learner(cfg)
    xs = pairs(6)
    for x in xs[:2]:
        learner.step(x)
    learner.save()
    good = weights(learner)
    with torch.no_grad():
        next(learner.pipe.stages[0].module.parameters()).fill_(float("nan"))
    assert learner.step(xs[2]) is None
    assert learner.nonfinite == 1 and learner.lr == pytest.approx(5e-4)
    assert all(torch.equal(a, b) for a, b in zip(good, weights(learner), strict=True))
    assert all(g["lr"] == pytest.approx(5e-4) for s in learner.pipe.stages for g in s.optimizer.param_groups)
    r = learner.step(xs[3])
    assert r is not None and np.isfinite(r.loss)
    with torch.no_grad():
        next(learner.pipe.stages[0].module.parameters()).fill_(float("inf"))
    assert learner.save() == -1  # never checkpoint broken weights
    assert checkpoints.load(cfg.checkpoint_path)["pipeline"]["frames"] == 2
    learner.pipe.close()
