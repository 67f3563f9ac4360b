"""Stash, hybrid, GPipe and CDP against plain single-device implementations of their update rules
(tests/schedule_reference.py), and the properties each schedule promises."""

from __future__ import annotations

import engine_reference as ref
import pytest
import schedule_reference as sref
import torch
from torch import nn

from pipeline_core import Pipeline
from pipeline_core.schedules import CDPv1, CDPv2, GPipe, Hybrid, Stash, make_schedule

STEPS = 24
TOL = 1e-6
BATCH = 12  # splits into 1, 2, 3 or 4 equal micro-batches
BALANCES = {1: [5], 2: [3, 2], 3: [2, 2, 1], 4: [2, 1, 1, 1]}
OPTIMIZERS = {
    "sgd": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
    "adam": lambda p: torch.optim.Adam(p, lr=1e-2),
}


pytestmark = pytest.mark.usefixtures("one_intra_op_thread")


def make_model() -> nn.Sequential:
    torch.manual_seed(0)
    widths = [6, 16, 16, 16, 16]
    blocks = [nn.Sequential(nn.Linear(a, b), nn.Tanh()) for a, b in zip(widths, widths[1:], strict=False)]
    return nn.Sequential(*blocks, nn.Linear(16, 3))


def stream(batch: int, n: int = STEPS):
    gen = torch.Generator().manual_seed(1)
    xs = [torch.rand(batch, 6, generator=gen) for _ in range(n)]
    ys = [torch.rand(batch, 3, generator=gen) for _ in range(n)]
    return xs, ys


def mse(out, target):
    return (out - target).pow(2).mean()


def run(pipe: Pipeline, xs, ys):
    results = [pipe.step(x, y) for x, y in zip(xs, ys, strict=True)] + pipe.flush()
    outputs = {r.frame: r.output for r in results if r.frame is not None}
    losses = {r.frame: r.loss for r in results if r.frame is not None}
    return outputs, losses


def assert_matches(pipe: Pipeline, got, want, tol: float = TOL) -> None:
    (outputs, losses), (want_out, want_loss, want_modules) = got, want
    assert sorted(losses) == sorted(want_loss) == list(range(STEPS))
    for t in want_loss:
        assert abs(losses[t] - want_loss[t]) <= tol, (t, losses[t], want_loss[t])
        torch.testing.assert_close(outputs[t], want_out[t], atol=tol, rtol=0)
    got_w, want_w = ref.weights(s.module for s in pipe.stages), ref.weights(want_modules)
    assert len(got_w) == len(want_w)
    for g, w in zip(got_w, want_w, strict=True):
        torch.testing.assert_close(g, w, atol=tol, rtol=0)


def pipeline(depth: int, schedule, opt: str = "adam") -> Pipeline:
    return Pipeline(
        make_model(),
        torch.zeros(BATCH, 6),
        balance=BALANCES[depth],
        loss_fn=mse,
        optimizer=OPTIMIZERS[opt],
        schedule=schedule,
    )


@pytest.mark.parametrize("depth", [1, 2, 3, 4])
@pytest.mark.parametrize("opt", sorted(OPTIMIZERS))
def test_stash_matches_the_plain_reference(depth, opt):
    xs, ys = stream(1)
    with Pipeline(
        make_model(), xs[0], balance=BALANCES[depth], loss_fn=mse, optimizer=OPTIMIZERS[opt], schedule="stash"
    ) as pipe:
        got = run(pipe, xs, ys)
        assert_matches(pipe, got, sref.stash_reference(make_model(), BALANCES[depth], OPTIMIZERS[opt], mse, xs, ys))


@pytest.mark.parametrize("depth,after", [(2, 7), (4, 10), (3, 0), (3, STEPS)])
def test_hybrid_is_stash_then_drained_then_exact(depth, after):
    xs, ys = stream(1)
    schedule = Hybrid(depth, hybrid_after=after)
    with Pipeline(
        make_model(), xs[0], balance=BALANCES[depth], loss_fn=mse, optimizer=OPTIMIZERS["sgd"], schedule=schedule
    ) as pipe:
        got = run(pipe, xs, ys)
        want = sref.hybrid(make_model(), BALANCES[depth], OPTIMIZERS["sgd"], mse, xs, ys, after)
        assert_matches(pipe, got, want)


@pytest.mark.parametrize("checkpoint", ["never", "except_last", "always"])
@pytest.mark.parametrize("depth,chunks", [(1, 3), (2, 4), (3, 2), (4, 4)])
def test_gpipe_gradients_are_those_of_the_whole_batch(depth, chunks, checkpoint):
    xs, ys = stream(BATCH)
    with pipeline(depth, GPipe(depth, chunks=chunks, checkpoint=checkpoint)) as pipe:
        got = run(pipe, xs, ys)
        assert_matches(pipe, got, sref.gpipe(make_model(), OPTIMIZERS["adam"], mse, xs, ys))


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("depth", [1, 2, 3, 4])
@pytest.mark.parametrize("opt", sorted(OPTIMIZERS))
def test_cdp_follows_its_update_rule(version, depth, opt):
    xs, ys = stream(BATCH)
    with pipeline(depth, f"cdp-v{version}", opt) as pipe:
        got = run(pipe, xs, ys)
        want = sref.cdp(make_model(), BALANCES[depth], OPTIMIZERS[opt], mse, xs, ys, version)
        assert_matches(pipe, got, want)


def test_cdp_v1_and_v2_differ_and_v2_is_not_plain_sgd():
    """Guards the reference itself: the three rules give different weights."""
    xs, ys = stream(BATCH)
    finals = {}
    for version in (1, 2):
        finals[version] = ref.weights(sref.cdp(make_model(), BALANCES[3], OPTIMIZERS["sgd"], mse, xs, ys, version)[2])
    plain = ref.weights([sref.gpipe(make_model(), OPTIMIZERS["sgd"], mse, xs, ys)[2]])
    for a, b in ((finals[1], finals[2]), (finals[2], plain)):
        assert max((x - y).abs().max().item() for x, y in zip(a, b, strict=True)) > 1e-4


SCHEDULES = {
    "stash": lambda d: Stash(d),
    "hybrid": lambda d: Hybrid(d, hybrid_after=8),
    "gpipe": lambda d: GPipe(d, chunks=4, checkpoint="always"),
    "cdp-v1": CDPv1,
    "cdp-v2": CDPv2,
}


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_every_stage_learns(name):
    xs, ys = stream(BATCH)
    with pipeline(4, SCHEDULES[name](4), "sgd") as pipe:
        before = ref.stage_weights(pipe)
        run(pipe, xs, ys)
        ref.assert_every_stage_learned(before, pipe)


def test_stash_memory_grows_with_the_distance_to_the_end():
    xs, ys = stream(1, 10)
    with Pipeline(make_model(), xs[0], balance=BALANCES[4], loss_fn=mse, schedule="stash") as pipe:
        for x, y in zip(xs, ys, strict=True):
            pipe.step(x, y)
            # between steps stage h holds the inputs of frames b+1..t-h: 2(D-1-h) of them
        assert [len(s.stash) for s in pipe.stages] == [6, 4, 2, 0]
        pipe.flush()
        assert all(not s.stash and not s.forwarded for s in pipe.stages)


def test_outputs_come_out_with_their_frame_index():
    xs, ys = stream(BATCH, 6)
    for schedule, first in [("stash", 3), ("gpipe", 0), ("cdp-v2", 1), ("cdp-v1", 1)]:
        with pipeline(4, schedule) as pipe:
            frames = [pipe.step(x, y).frame for x, y in zip(xs, ys, strict=True)]
            assert frames[first:] == list(range(len(xs) - first)), schedule
            assert sorted(f for f in frames if f is not None) + [r.frame for r in pipe.flush()] == list(range(6))


def test_hybrid_pauses_outputs_while_draining_then_runs_2d_minus_2_frames_behind():
    xs, ys = stream(1, 10)
    with Pipeline(make_model(), xs[0], balance=BALANCES[4], loss_fn=mse, schedule=Hybrid(4, hybrid_after=2)) as pipe:
        frames = [pipe.step(x, y).frame for x, y in zip(xs, ys, strict=True)]
        assert frames == [None, None, None, 0, 1, None, None, None, 2, 3]
        assert [r.frame for r in pipe.flush()] == list(range(4, 10))


def test_gpipe_and_cdp_inference_are_the_model_outputs():
    xs, _ = stream(BATCH, 5)
    model = make_model()
    with torch.no_grad():
        want = [model(x) for x in xs]
    for schedule in ("gpipe", "cdp-v1"):
        with Pipeline(make_model(), xs[0], balance=BALANCES[4], schedule=schedule) as pipe:
            results = [pipe.step(x) for x in xs] + pipe.flush()
        got = {r.frame: r.output for r in results if r.frame is not None}
        assert sorted(got) == list(range(5))
        for t, w in enumerate(want):
            torch.testing.assert_close(got[t], w, atol=TOL, rtol=0)


def test_bad_options_and_inputs_are_refused_clearly():
    with pytest.raises(ValueError, match="does not split"):
        Pipeline(make_model(), torch.zeros(10, 6), balance=BALANCES[4], schedule="cdp-v2")
    with pytest.raises(ValueError, match="does not split"):
        Pipeline(make_model(), torch.zeros(5, 6), balance=BALANCES[2], schedule=GPipe(2, chunks=2))
    with pytest.raises(ValueError, match="checkpoint must be one of"):
        GPipe(2, checkpoint="sometimes")
    with pytest.raises(ValueError, match="hybrid_after"):
        Hybrid(2, hybrid_after=-1)
    with pytest.raises(ValueError, match="built for 3 stages"):
        make_schedule(Stash(3), 2)


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@cuda
@pytest.mark.cuda
@pytest.mark.parametrize("name", ["stash", "hybrid", "gpipe", "cdp-v1", "cdp-v2"])
def test_cuda_schedules_match_their_references(name):
    """The same equivalences on CUDA streams (message slots, stashed copies of received buffers)."""
    depth, opt = 3, OPTIMIZERS["sgd"]
    xs, ys = stream(BATCH)
    schedule = {
        "stash": Stash(depth),
        "hybrid": Hybrid(depth, hybrid_after=9),
        "gpipe": GPipe(depth, chunks=4, checkpoint="except_last"),
        "cdp-v1": CDPv1(depth),
        "cdp-v2": CDPv2(depth),
    }[name]
    balance = BALANCES[depth]
    want = {
        "stash": lambda: sref.stash_reference(make_model(), balance, opt, mse, xs, ys),
        "hybrid": lambda: sref.hybrid(make_model(), balance, opt, mse, xs, ys, 9),
        "gpipe": lambda: sref.gpipe(make_model(), opt, mse, xs, ys),
        "cdp-v1": lambda: sref.cdp(make_model(), balance, opt, mse, xs, ys, 1),
        "cdp-v2": lambda: sref.cdp(make_model(), balance, opt, mse, xs, ys, 2),
    }[name]()
    xs_c, ys_c = [x.cuda() for x in xs], [y.cuda() for y in ys]
    with Pipeline(
        make_model(), xs_c[0], balance=balance, devices=["cuda:0"], loss_fn=mse, optimizer=opt, schedule=schedule
    ) as pipe:
        outputs, losses = run(pipe, xs_c, ys_c)
        assert_matches(pipe, ({k: v.cpu() for k, v in outputs.items()}, losses), want, tol=1e-5)
