"""The worker's learner: checkpoints (atomic, resumable, guarded), recovery to the last good weights, a new learning
size with the same weights, the zero-flow baseline, its frozen start's scores and its best weights."""

from __future__ import annotations

import math
import time
from dataclasses import replace

import numpy as np
import pytest
import torch

from models.block_codec import READ_EVERY
from models.feeds import PRIOR_GROUP
from models.online import KNOWN_MOTION, frame_pair
from pipeline_core.processes import ProcessRuntime
from pipeline_core.runtime import LocalRuntime
from server.stream import checkpoints
from server.stream.learner import learner as learner_module
from server.stream.learner.learner import CheckpointMismatch, Learner, LearnerConfig
from server.stream.learner.profile_cache import JsonCache
from tests.codec_support import H, W, stream

pytestmark = pytest.mark.realtime

SIZE = (32, 32)


@pytest.fixture
def cfg(tmp_path) -> LearnerConfig:
    return LearnerConfig(name="unit", model="fast", init="scratch", stages=1, lr=1e-3, schedule="partime",
                         devices=None, checkpoint_path=tmp_path / "unit.pt")  # fmt: skip


def pairs(n: int, size: tuple[int, int] = SIZE):
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (n + 1, size[1], size[0], 3), dtype=np.uint8)
    return [frame_pair(frames[i], frames[i + 1]) for i in range(n)]


def weights(learner: Learner) -> list[torch.Tensor]:
    return [p.detach().clone() for p in learner.pipe.module().parameters()]


def test_checkpoint_is_atomic_and_resumes(cfg):
    learner = Learner(cfg, SIZE)
    for x in pairs(3):
        assert learner.step(x)[1] is not None
    assert learner.save() == 3
    assert [p.name for p in cfg.checkpoint_path.parent.iterdir()] == ["unit.pt"]  # no temp file left behind
    saved = weights(learner)
    learner.pipe.close()
    again = Learner(replace(cfg, lr=None), SIZE)
    assert again.resumed_from == 3 and again.lr == pytest.approx(1e-3)
    assert all(torch.equal(a, b) for a, b in zip(saved, weights(again), strict=True))
    again.pipe.close()
    with pytest.raises(CheckpointMismatch):
        Learner(replace(cfg, init="pretrained"), SIZE)
    bigger = Learner(replace(cfg, lr=None), (48, 32))  # the learning size is the budget's: any size resumes
    assert bigger.resumed_from == 3 and all(torch.equal(a, b) for a, b in zip(saved, weights(bigger), strict=True))
    bigger.pipe.close()


@pytest.mark.parametrize("kind", ["garbage", "empty", "cut-short", "another-torch-file"])
def test_a_damaged_checkpoint_is_refused_in_words(cfg, kind):
    """Bytes at the name's checkpoint that are not a stream's checkpoint: torch raises a ``KeyError``, an
    ``EOFError``, a zip reader's ``RuntimeError`` or nothing at all for them; the learner refuses them in words that
    name the file, never its folder (the stream then ends in ``checkpoint_unreadable``)."""
    if kind == "cut-short":
        learner = Learner(cfg, SIZE)
        learner.save()
        learner.pipe.close()
        data = cfg.checkpoint_path.read_bytes()
        cfg.checkpoint_path.write_bytes(data[: len(data) // 2])
    elif kind == "another-torch-file":
        torch.save({"weights": torch.zeros(3)}, cfg.checkpoint_path)
    else:
        cfg.checkpoint_path.write_bytes(b"not a checkpoint " * 64 if kind == "garbage" else b"")
    with pytest.raises(checkpoints.CheckpointUnreadable, match=r"^checkpoint unit\.pt cannot be read") as refused:
        Learner(cfg, SIZE)
    assert str(cfg.checkpoint_path.parent) not in str(refused.value)


def test_every_stage_learns_at_the_streams_rate_also_after_a_resume(cfg):
    cfg = replace(cfg, stages=2, lr=4.5e-3)
    learner = Learner(cfg, SIZE)
    lrs = [[g["lr"] for g in s.optimizer.param_groups] for s in learner.pipe.stages]
    assert lrs == [[pytest.approx(4.5e-3)], [pytest.approx(4.5e-3)]]  # stale stage 0 too (models.online_pipeline)
    for x in pairs(3):
        learner.step(x)
    learner.save()
    learner.pipe.close()
    # A restart after a crash: the checkpoint's optimizer lrs must not win.
    halved = Learner(replace(cfg, lr=2.25e-3), SIZE)
    assert [g["lr"] for s in halved.pipe.stages for g in s.optimizer.param_groups] == [
        pytest.approx(2.25e-3),
        pytest.approx(2.25e-3),
    ]
    halved.pipe.close()


def test_recovery_restores_checkpoint_and_halves_lr(cfg):
    learner = Learner(cfg, SIZE)
    xs = pairs(6)
    for x in xs[:2]:
        learner.step(x)
    learner.save()
    good = weights(learner)
    with torch.no_grad():
        next(learner.pipe.stages[0].module.parameters()).fill_(float("nan"))
    assert not np.isfinite(learner.step(xs[2])[1].loss)  # the caller reads it, and recovers (tests/test_frame_loop.py)
    learner.recover()
    assert learner.nonfinite == 1 and learner.lr == pytest.approx(5e-4)
    assert all(torch.equal(a, b) for a, b in zip(good, weights(learner), strict=True))
    assert all(g["lr"] == pytest.approx(5e-4) for s in learner.pipe.stages for g in s.optimizer.param_groups)
    _, r = learner.step(xs[3])
    assert r is not None and np.isfinite(r.loss)
    with torch.no_grad():
        next(learner.pipe.stages[0].module.parameters()).fill_(float("inf"))
    assert learner.save() == -1  # never checkpoint broken weights
    assert checkpoints.load(cfg.checkpoint_path)["pipeline"]["frames"] == 2
    learner.pipe.close()


def test_resize_keeps_weights_optimizer_and_split_and_learns_on(cfg, tmp_path):
    splits = JsonCache(tmp_path / "splits.json")
    learner = Learner(replace(cfg, stages=2), SIZE, splits)
    assert splits.get("fast|32x32|2|cpu") == learner.pipe.balance  # measured once, then cached
    for x in pairs(4):
        learner.step(x)
    before = weights(learner)
    moments = [s.optimizer.state_dict()["state"] for s in learner.pipe.stages]
    split = learner.pipe.balance
    learner.resize((48, 40))
    assert learner.size == (48, 40) and learner.pipe.balance == split
    assert all(torch.equal(a, b) for a, b in zip(before, weights(learner), strict=True))
    after = [s.optimizer.state_dict()["state"] for s in learner.pipe.stages]
    assert all(torch.equal(a[k]["exp_avg"], b[k]["exp_avg"]) for a, b in zip(moments, after, strict=True) for k in a)
    results = [learner.step(x)[1] for x in pairs(3, (48, 40))]
    assert results[-1] is not None and results[-1].output.shape[-2:] == (40, 48) and np.isfinite(results[-1].loss)
    learner.pipe.close()
    again = Learner(replace(cfg, stages=2, name="other"), SIZE, splits)  # the cached split: nothing measured
    assert again.pipe.balance == split
    again.pipe.close()


def test_a_net_of_another_version_measures_its_split_again_and_refuses_old_checkpoints(cfg, tmp_path):
    """A split cached, or a checkpoint saved, for a net with another layer count (an older release of it): the split
    is measured again; the checkpoint is refused in words, not with the engine's complaint about its balance."""
    splits = JsonCache(tmp_path / "splits.json")
    splits.put("fast|32x32|2|cpu", [1, 1])  # a two-layer net's
    learner = Learner(replace(cfg, stages=2), SIZE, splits)
    assert sum(learner.pipe.balance) == len(learner.pipe.module()) > 2
    assert splits.get("fast|32x32|2|cpu") == learner.pipe.balance
    learner.save()
    learner.pipe.close()
    state = torch.load(cfg.checkpoint_path, weights_only=False)
    state["pipeline"]["balance"] = [*state["pipeline"]["balance"][:-1], state["pipeline"]["balance"][-1] - 1]
    torch.save(state, cfg.checkpoint_path)
    with pytest.raises(CheckpointMismatch, match="another version of the fast net"):
        Learner(replace(cfg, stages=2), SIZE, splits)


@pytest.mark.parametrize("init", ["scratch", "pretrained"])
def test_zero_flow_loss_is_the_learners_loss_of_zero_flow(cfg, init):
    """From scratch the pair's own photometric loss; from the shipped weights the error on the pair made from it."""
    learner = Learner(replace(cfg, init=init), SIZE)
    x = pairs(1)[0]
    zero, _ = learner.step(x)
    step_input, target = learner._fed
    expected = float(learner.pipe.loss_fn(torch.zeros(len(step_input), 2, 32, 32), target))
    assert float(zero) == pytest.approx(expected) and expected > 0
    learner.pipe.close()
    if init == "scratch":
        learner = Learner(replace(cfg, name="still"), SIZE)
        still = frame_pair(np.full((32, 32, 3), 90, np.uint8), np.full((32, 32, 3), 90, np.uint8))
        assert float(learner.step(still)[0]) < 1e-2 * expected  # nothing moves: zero flow explains it all
        learner.pipe.close()


def test_new_learner_starts_from_its_init_at_its_rates(cfg):
    from models.flow_nets import build_flow_net
    from models.online import CONV_RATES, KNOWN_MOTION, PRIOR_SCALE

    learner = Learner(replace(cfg, init="pretrained", lr=None), SIZE)
    shipped = build_flow_net("fast", init="pretrained").state_dict()
    assert all(torch.equal(shipped[k], v) for k, v in learner.pipe.module().state_dict().items())
    assert learner.lr == KNOWN_MOTION.lr and learner.learning is KNOWN_MOTION
    rates = {g["lr"] for s in learner.pipe.stages for g in s.optimizer.param_groups}
    expected = sorted([*(KNOWN_MOTION.lr * share for share in CONV_RATES.values()), KNOWN_MOTION.lr * PRIOR_SCALE])
    assert sorted(rates) == pytest.approx(expected)
    learner.save()
    assert checkpoints.load(cfg.checkpoint_path)["init"] == "pretrained"
    assert checkpoints.load(cfg.checkpoint_path)["learning"] == "known-motion"
    learner.pipe.close()
    halved = Learner(replace(cfg, init="pretrained", lr=KNOWN_MOTION.lr / 2), SIZE)  # a restart after a crash
    rates = {g["lr"] for s in halved.pipe.stages for g in s.optimizer.param_groups}
    assert sorted(rates) == pytest.approx([rate / 2 for rate in expected])
    halved.pipe.close()


def test_a_checkpoint_whose_optimizer_grouped_the_parameters_otherwise_resumes_its_weights(cfg):
    """As a checkpoint of a release whose optimizer grouped the parameters otherwise (every learned convolution in one
    group, before the 1/2 level's learned at a share of the rate): the weights come back, the moments of that stage
    start afresh, and it learns on."""
    cfg = replace(cfg, init="pretrained", lr=None)
    learner = Learner(cfg, SIZE)
    for x in pairs(3):
        learner.step(x)
    learner.save()
    saved = weights(learner)
    learner.pipe.close()
    state = torch.load(cfg.checkpoint_path, weights_only=False)
    optimizer = state["pipeline"]["stages"][0]["optimizer"]
    full, half, *priors = optimizer["param_groups"]
    optimizer["param_groups"] = [full | {"params": full["params"] + half["params"]}, *priors]
    torch.save(state, cfg.checkpoint_path)
    again = Learner(cfg, SIZE)
    assert again.resumed_from == 3 and all(torch.equal(a, b) for a, b in zip(saved, weights(again), strict=True))
    assert again.pipe.stages[0].optimizer.state == {}  # fresh moments
    assert again.step(pairs(1)[0])[1] is not None
    again.pipe.close()


def test_a_checkpoint_that_learned_another_way_is_refused_in_words(cfg):
    learner = Learner(replace(cfg, init="pretrained"), SIZE)
    learner.save()
    learner.pipe.close()
    state = torch.load(cfg.checkpoint_path, weights_only=False)
    del state["learning"]  # as every checkpoint before known motion: photometric
    torch.save(state, cfg.checkpoint_path)
    with pytest.raises(CheckpointMismatch, match="photometric"):
        Learner(replace(cfg, init="pretrained"), SIZE)


@pytest.mark.parametrize(("init", "stages"), [("pretrained", 1), ("pretrained", 2), ("scratch", 1)])
def test_the_frozen_start_scores_what_the_learner_learned_from(cfg, init, stages):
    """Before any update the learner's weights are its start's (random ones too): the two losses on the step's input
    agree; after some learning the start's stays where it was while the learner's moves."""
    learner = Learner(replace(cfg, init=init, stages=stages, schedule="sequential"), SIZE)
    xs = pairs(4)
    _, r = learner.step(xs[0])
    assert r is not None and start_loss(learner) == pytest.approx(float(r.loss_tensor), rel=1e-5)
    for x in xs[1:]:
        learner.step(x)
    start = start_loss(learner)
    assert start_loss(learner) == start  # frozen: no graph, no update
    learner.pipe.close()


def start_loss(learner: Learner) -> float:
    """The frozen start's loss on the last step's learned pair, its layers all run at once."""
    loss = learner.start_score().advance(math.inf)
    assert loss is not None
    return float(loss)


def test_going_back_to_the_best_weights_keeps_the_frame_count(cfg):
    learner = Learner(replace(cfg, init="pretrained"), SIZE)
    xs = pairs(6)
    for x in xs[:2]:
        learner.step(x)
    learner.keep_best()
    best = weights(learner)
    for x in xs[2:5]:
        learner.step(x)
    assert not all(torch.equal(a, b) for a, b in zip(best, weights(learner), strict=True))
    learner.go_back_to_best()
    assert all(torch.equal(a, b) for a, b in zip(best, weights(learner), strict=True))
    assert learner.pipe.state_dict()["frames"] == 5
    _, r = learner.step(xs[5])
    assert r is not None and r.frame == 5
    learner.pipe.close()


def test_a_compiled_twin_takes_over_with_the_same_weights_and_learns_the_same(cfg):
    """On a GPU the stages are compiled in the background while the stream learns eagerly; then the compiled pipeline
    takes over the weights and optimizer states. Dynamo's ``eager`` backend traces what ``inductor`` would compile,
    and runs the same ops: the two learners stay equal. From the shipped weights, as the service starts a stream: the
    twin warms up on a known-motion step (a batch of two and its made flow), not on a bare pair."""
    cfg = replace(cfg, init="pretrained", lr=None)
    compiled = Learner(replace(cfg, compile_backend="eager"), SIZE)
    eager = Learner(cfg, SIZE)
    xs = pairs(6)
    for x in xs[:2]:
        compiled.step(x)
        eager.step(x)
    deadline = time.monotonic() + 120
    while not compiled.compiled_ready:
        assert compiled._twin is not None and compiled._twin.error is None and time.monotonic() < deadline
        time.sleep(0.05)
    compiled.pipe.flush(), eager.pipe.flush()
    compiled.adopt_compiled()
    assert compiled.compiled and all(s.run is not s.module for s in compiled.pipe.stages)
    assert all(torch.equal(a, b) for a, b in zip(weights(eager), weights(compiled), strict=True))
    for x in xs[2:]:
        (_, a), (_, b) = eager.step(x), compiled.step(x)
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(b.output, a.output, rtol=0, atol=1e-6)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(weights(eager), weights(compiled), strict=True))
    compiled.close(), eager.close()


def test_checkpoints_at_a_url_resume_as_from_a_folder(cfg):
    """A cluster's nodes share checkpoints in storage they all reach: an fsspec URL (here fsspec's in-process
    ``memory://`` store) works as a folder does."""
    at_url = replace(cfg, checkpoint_path=checkpoints.checkpoint_path("memory://overtime-test/ckpt", "unit"))
    learner = Learner(at_url, SIZE)
    for x in pairs(3):
        learner.step(x)
    assert learner.save() == 3
    saved = weights(learner)
    learner.close()
    again = Learner(replace(at_url, lr=None), SIZE)
    assert again.resumed_from == 3 and all(torch.equal(a, b) for a, b in zip(saved, weights(again), strict=True))
    assert checkpoints.load(at_url.checkpoint_path)["pipeline"]["frames"] == 3
    again.close()


def test_cpu_stages_are_processes_that_learn_as_threads_do(cfg, monkeypatch, tmp_path):
    """On CPU a learner of two stages runs them as processes (``stage_runtime``: stage threads take turns on the
    GIL), the second started early; they learn what the same stages as threads learn (compared once both have
    finished their steps: between two, the one started early is an update ahead), and keep it across a new learning
    size."""
    two, splits = replace(cfg, stages=2), JsonCache(tmp_path / "splits.json")  # one split: the first one measured
    with_processes = Learner(two, SIZE, splits)
    monkeypatch.setattr(learner_module, "stage_runtime", lambda *_: {"runtime": "local", "start_method": None})
    with_threads = Learner(two, SIZE, splits)
    monkeypatch.undo()
    try:
        assert isinstance(with_processes.pipe.runtime, ProcessRuntime)
        assert isinstance(with_threads.pipe.runtime, LocalRuntime)
        assert with_processes.pipe.balance == with_threads.pipe.balance
        for x in pairs(4):
            (_, a), (_, b) = with_processes.step(x), with_threads.step(x)
            assert (a is None) == (b is None)
            if a is not None:
                torch.testing.assert_close(a.output, b.output)
        assert with_processes.pipe.runtime.starts_early
        for learner in (with_processes, with_threads):
            learner.pipe.flush()
        for p, q in zip(weights(with_processes), weights(with_threads), strict=True):
            torch.testing.assert_close(p, q)
        before = weights(with_processes)
        with_processes.resize((40, 24))
        assert isinstance(with_processes.pipe.runtime, ProcessRuntime)
        for p, q in zip(weights(with_processes), before, strict=True):
            torch.testing.assert_close(p, q, rtol=0, atol=0)
    finally:
        with_processes.close()
        with_threads.close()


def prior_groups(learner: Learner) -> list[dict]:
    """The priors' optimizer group of every stage, as the pipeline's state holds it (in the stage processes too)."""
    stages = learner.pipe.state_dict()["stages"]
    return [g for s in stages for g in s["optimizer"]["param_groups"] if PRIOR_GROUP in g]


def test_a_starved_codecs_stream_lets_its_priors_go_in_every_stage_process_and_again_after_going_back(cfg):
    """``models.feeds.KnownMotionFeed``'s decision reaches the stage processes, and a load of weights saved with the
    other options (going back to the start's) is followed by the stream's own again at the next step."""
    learner = Learner(replace(cfg, init="pretrained", stages=2, lr=None), (W, H))
    starved = KNOWN_MOTION.prior_options(stages=2)[True]
    assert isinstance(learner.pipe.runtime, ProcessRuntime) and len(prior_groups(learner)) == 2
    xs = stream(starved_grid=True, skips=True, pairs=READ_EVERY + 2)
    for x in xs[:READ_EVERY]:
        assert all(g["anchor"] == KNOWN_MOTION.prior_anchor for g in prior_groups(learner))
        learner.step(x)
    groups = prior_groups(learner)
    assert all(g["anchor"] == 0.0 and g["lr_scale"] == pytest.approx(starved["lr_scale"]) for g in groups)
    learner.go_back_to_best()  # the weights it began with, saved with the options of a stream not starved
    assert all(g["anchor"] == KNOWN_MOTION.prior_anchor for g in prior_groups(learner))
    learner.step(xs[READ_EVERY])
    assert all(g["anchor"] == 0.0 for g in prior_groups(learner))
    _, r = learner.step(xs[READ_EVERY + 1])  # and it learns on
    assert r is not None and r.frame == READ_EVERY
    learner.pipe.close()
