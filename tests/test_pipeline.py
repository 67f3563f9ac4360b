"""The engine against plain re-implementations of its schedules (tests/engine_reference.py)."""

from __future__ import annotations

import engine_reference as ref
import pytest
import torch
from pipeline_support import OPTIMIZERS, STEPS, TOL, assert_close_dicts, make_model, mse, run, stream
from torch import nn

from pipeline_core import Pipeline, PipelineError

pytestmark = pytest.mark.usefixtures("one_intra_op_thread")


def assert_same_weights(pipe: Pipeline, modules, tol: float = TOL) -> None:
    got = ref.weights(s.module for s in pipe.stages)
    want = ref.weights(modules)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, atol=tol, rtol=0)


@pytest.mark.parametrize("opt", sorted(OPTIMIZERS))
def test_one_stage_partime_is_the_plain_training_loop_bit_exact(opt):
    model, (xs, ys) = make_model(), stream()
    with Pipeline(model, xs[0], stages=1, loss_fn=mse, optimizer=OPTIMIZERS[opt]) as pipe:
        outputs, losses = run(pipe, xs, ys)
    want_out, want_loss, want_model = ref.plain_loop(model, OPTIMIZERS[opt], mse, xs, ys)
    assert losses == want_loss
    assert all(torch.equal(outputs[t], want_out[t]) for t in want_out)
    assert all(
        torch.equal(a, b)
        for a, b in zip(ref.weights(pipe.stages[0].module for _ in [0]), ref.weights([want_model]), strict=True)
    )


@pytest.mark.parametrize("balance", [[3, 2], [2, 2, 1], [1, 2, 1, 1]])
@pytest.mark.parametrize("opt", sorted(OPTIMIZERS))
def test_partime_matches_the_plain_reference(balance, opt):
    model, (xs, ys) = make_model(), stream()
    with Pipeline(model, xs[0], balance=balance, loss_fn=mse, optimizer=OPTIMIZERS[opt]) as pipe:
        outputs, losses = run(pipe, xs, ys)
        want_out, want_loss, parts = ref.partime(model, balance, OPTIMIZERS[opt], mse, xs, ys)
        assert_close_dicts(losses, want_loss)
        assert_close_dicts(outputs, want_out)
        assert_same_weights(pipe, parts)


def test_per_stage_learning_rates_match_the_reference():
    model, (xs, ys) = make_model(), stream()
    with Pipeline(model, xs[0], balance=[2, 2, 1], loss_fn=mse, optimizer=OPTIMIZERS["adam"]) as pipe:
        assert pipe.gradient_delays == [4, 2, 0]  # the loss behind stage h's update is 2(D-1-h) frames old
        lrs = [2e-3, 5e-3, 1e-2]
        pipe.set_lr(lrs)
        outputs, losses = run(pipe, xs, ys)
        want_out, want_loss, parts = ref.partime(model, [2, 2, 1], OPTIMIZERS["adam"], mse, xs, ys, lrs)
        assert_close_dicts(losses, want_loss)
        assert_close_dicts(outputs, want_out)
        assert_same_weights(pipe, parts)
        with pytest.raises(ValueError, match="2 learning rates for 3 stages"):
            pipe.set_lr([1e-3, 1e-3])


def shrink_where_active(out, grad, frames_apart):
    """A stale-gradient alignment that depends on the output and the gap (any would do)."""
    return grad * torch.sigmoid(out) / frames_apart


@pytest.mark.parametrize("runtime", ["local", "processes"])
def test_an_aligned_stale_gradient_matches_the_reference(runtime):
    model, (xs, ys) = make_model(), stream()
    opt = OPTIMIZERS["sgd"]
    kw = {"balance": [2, 2, 1], "loss_fn": mse, "optimizer": opt, "runtime": runtime}
    with Pipeline(model, xs[0], align_stale_grad=shrink_where_active, **kw) as pipe:
        outputs, losses = run(pipe, xs, ys)
        want_out, want_loss, parts = ref.partime(model, [2, 2, 1], opt, mse, xs, ys, align=shrink_where_active)
        assert_close_dicts(losses, want_loss)
        assert_close_dicts(outputs, want_out)
        for got, want in zip(ref.weights([pipe.module()]), ref.weights(parts), strict=True):  # gathered from workers
            torch.testing.assert_close(got, want, atol=TOL, rtol=0)
    with Pipeline(model, xs[0], **kw) as plain:
        plain_out, _ = run(plain, xs, ys)
    assert not torch.allclose(plain_out[STEPS - 1], outputs[STEPS - 1])  # the alignment changed what was learned


def test_stages_without_balance_profiles_a_balance_and_still_matches_the_reference():
    model, (xs, ys) = make_model(), stream()
    with Pipeline(model, xs[0], stages=3, loss_fn=mse, optimizer=OPTIMIZERS["sgd"]) as pipe:
        assert len(pipe.balance) == 3 and sum(pipe.balance) == len(model) and min(pipe.balance) >= 1
        outputs, losses = run(pipe, xs, ys)
        want_out, want_loss, parts = ref.partime(model, pipe.balance, OPTIMIZERS["sgd"], mse, xs, ys)
        assert_close_dicts(losses, want_loss)
        assert_close_dicts(outputs, want_out)
        assert_same_weights(pipe, parts)


@pytest.mark.parametrize("balance", [[3, 2], [1, 2, 1, 1]])
def test_sequential_schedule_is_plain_backprop(balance):
    model, (xs, ys) = make_model(), stream()
    make_opt = OPTIMIZERS["adam"]
    with Pipeline(model, xs[0], balance=balance, loss_fn=mse, optimizer=make_opt, schedule="sequential") as pipe:
        outputs, losses = run(pipe, xs, ys)
        want_out, want_loss, want_model = ref.plain_loop(model, make_opt, mse, xs, ys)
        assert_close_dicts(losses, want_loss)
        assert_close_dicts(outputs, want_out)
        assert_same_weights(pipe, [want_model])


def test_targets_never_wait_in_the_transport_between_steps():
    """A target crosses the transport in the step that computes its loss. Sent when fed, it would wait
    D-1 steps in a static CUDA slot that frame parity reuses every 2 steps (overwritten for D >= 3)."""
    model, (xs, ys) = make_model(), stream(8)
    with Pipeline(model, xs[0], balance=[2, 1, 1, 1], loss_fn=mse, optimizer=OPTIMIZERS["sgd"]) as pipe:
        for x, y in zip(xs, ys, strict=True):
            pipe.step(x, y)
            assert not [key for key in pipe.runtime.transport._messages if key[0] == "target"]


def test_every_stage_learns():
    model, (xs, ys) = make_model(), stream()
    with Pipeline(model, xs[0], balance=[2, 1, 1, 1], loss_fn=mse, optimizer=OPTIMIZERS["sgd"]) as pipe:
        before = ref.stage_weights(pipe)
        run(pipe, xs, ys)
        ref.assert_every_stage_learned(before, pipe)


def test_frame_indices_and_flush():
    model, (xs, ys) = make_model(), stream(10)
    with Pipeline(model, xs[0], balance=[2, 2, 1], loss_fn=mse) as pipe:
        frames = [pipe.step(x, y).frame for x, y in zip(xs, ys, strict=True)]
        assert frames == [None, None] + list(range(8))
        tail = pipe.flush()
        assert [r.frame for r in tail] == [8, 9]
        assert all(r.output is not None and r.loss is not None for r in tail)
        # A new epoch refills the pipeline and keeps counting frames.
        assert [pipe.step(x, y).frame for x, y in zip(xs[:3], ys[:3], strict=True)] == [None, None, 10]


def test_inference_outputs_are_the_model_outputs_delayed():
    model, (xs, _) = make_model(), stream(6)
    with Pipeline(model, xs[0], balance=[2, 3]) as pipe:
        results = [pipe.step(x) for x in xs] + pipe.flush()
    got = {r.frame: r.output for r in results if r.frame is not None}
    with torch.no_grad():
        assert_close_dicts(got, {t: model(x) for t, x in enumerate(xs)})


def test_state_dict_round_trip_continues_identically():
    model, (xs, ys) = make_model(), stream()
    make_opt = OPTIMIZERS["adam"]
    with Pipeline(model, xs[0], balance=[3, 2], loss_fn=mse, optimizer=make_opt) as a:
        for x, y in zip(xs[:10], ys[:10], strict=True):
            a.step(x, y)
        a.flush()
        state = a.state_dict()
        with Pipeline(make_model(), xs[0], balance=[3, 2], loss_fn=mse, optimizer=make_opt) as b:
            b.load_state_dict(state)
            got = [b.step(x, y).loss for x, y in zip(xs[10:], ys[10:], strict=True)]
        want = [a.step(x, y).loss for x, y in zip(xs[10:], ys[10:], strict=True)]
        assert got == want
        # The checkpoint is a snapshot: it did not follow the weights `a` learned since.
        assert not torch.equal(state["stages"][0]["module"]["0.0.weight"], a.stages[0].module[0][0].weight)
        whole = a.module()
        assert [n for n, _ in whole.named_children()] == [n for n, _ in model.named_children()]
        assert all(
            torch.equal(p, q)
            for p, q in zip(ref.weights([whole]), ref.weights(s.module for s in a.stages), strict=True)
        )


def test_user_errors_are_clear():
    model, (xs, _) = make_model(), stream(1)
    with pytest.raises(TypeError, match="nn.Sequential"):
        Pipeline(nn.Conv2d(3, 3, 1), xs[0])
    with pytest.raises(ValueError, match=r"balance \[2, 2\] sums to 4, but the model has 5 layers"):
        Pipeline(model, xs[0], balance=[2, 2])
    with pytest.raises(ValueError, match="the model's 5 layers, got 6"):
        Pipeline(model, xs[0], stages=6)
    with pytest.raises(ValueError, match="does not exist"):
        Pipeline(model, xs[0], devices=["cuda:7"])
    with pytest.raises(ValueError, match="not supported"):
        Pipeline(model, xs[0], devices=["meta"])
    with pytest.raises(ValueError, match="unknown schedule"):
        Pipeline(model, xs[0], stages=2, balance=[3, 2], schedule="nope")
    with Pipeline(model, xs[0], balance=[3, 2]) as pipe, pytest.raises(ValueError, match=r"frame shape \(1, 3, 9, 9\)"):
        pipe.step(torch.rand(1, 3, 9, 9))


class FailAt(nn.Module):
    """Raises on its n-th call: a stage that breaks mid-stream."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n, self.calls = n, 0

    def forward(self, x):
        self.calls += 1
        if self.calls == self.n:
            raise RuntimeError("boom")
        return x


def test_a_failing_stage_raises_naming_it_instead_of_hanging():
    model, (xs, ys) = make_model(), stream(8)
    layers = list(model)
    failing = nn.Sequential(*layers[:3], FailAt(5), *layers[3:])
    pipe = Pipeline(failing, xs[0], balance=[2, 2, 2], loss_fn=mse, timeout=10)
    with pipe, pytest.raises(PipelineError, match="stage 1 failed: boom"):
        for x, y in zip(xs, ys, strict=True):
            pipe.step(x, y)


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@cuda
@pytest.mark.cuda
@pytest.mark.parametrize("balance", [[3, 2], [2, 1, 1, 1]])
def test_cuda_partime_matches_the_reference(balance):
    """On CUDA streams, against the CPU reference (Adam's CUDA and CPU arithmetic agree to 1e-5)."""
    model, (xs, ys) = make_model(), stream()
    make_opt = lambda p: torch.optim.Adam(p, lr=1e-2)  # noqa: E731
    xs_c, ys_c = [x.cuda() for x in xs], [y.cuda() for y in ys]
    with Pipeline(
        model, xs_c[0], balance=balance, devices=["cuda:0"], loss_fn=mse, optimizer=make_opt, cuda_graph=False
    ) as pipe:
        outputs, losses = run(pipe, xs_c, ys_c)
        want_out, want_loss, parts = ref.partime(model, balance, make_opt, mse, xs, ys)
        assert_close_dicts(losses, want_loss, tol=1e-5)
        assert_close_dicts({k: v.cpu() for k, v in outputs.items()}, want_out, tol=1e-5)
        assert_same_weights(pipe, parts, tol=1e-5)


@cuda
@pytest.mark.cuda
@pytest.mark.parametrize("balance", [[3, 2], [2, 1, 1, 1]])
def test_cuda_graph_partime_matches_the_reference_with_the_same_arithmetic(balance):
    """Whole-step graphs need a capturable Adam, whose arithmetic (step counts and bias corrections on the device) is
    not the CPU's: a loss drifted 1.33e-5 from the CPU reference over 24 steps. With the same optimizer, the reference
    run on the same GPU, the graphs match it to 1e-6: the drift was the optimizer's arithmetic, not the graphs."""
    model, (xs, ys) = make_model(), stream()
    make_opt = lambda p: torch.optim.Adam(p, lr=1e-2, capturable=True, fused=True)  # noqa: E731
    xs_c, ys_c = [x.cuda() for x in xs], [y.cuda() for y in ys]
    with Pipeline(
        model, xs_c[0], balance=balance, devices=["cuda:0"], loss_fn=mse, optimizer=make_opt, cuda_graph=True
    ) as pipe:
        assert pipe._graphs is not None
        outputs, losses = run(pipe, xs_c, ys_c)
        want_out, want_loss, parts = ref.partime(model.cuda(), balance, make_opt, mse, xs_c, ys_c)
        assert_close_dicts(losses, want_loss, tol=1e-6)
        assert_close_dicts(outputs, want_out, tol=1e-6)
        assert_same_weights(pipe, parts, tol=1e-6)


@cuda
@pytest.mark.cuda
@pytest.mark.parametrize("graph", [False, True])
def test_cuda_every_stage_learns(graph):
    """Regression for the reference library, where in graph mode only the last stage trained."""
    model, (xs, ys) = make_model(), stream()
    xs_c, ys_c = [x.cuda() for x in xs], [y.cuda() for y in ys]
    with Pipeline(
        model,
        xs_c[0],
        balance=[2, 1, 1, 1],
        devices=["cuda:0"],
        loss_fn=mse,
        cuda_graph=graph,
        optimizer=lambda p: torch.optim.SGD(p, lr=0.05),
    ) as pipe:
        before = ref.stage_weights(pipe)
        run(pipe, xs_c, ys_c)
        ref.assert_every_stage_learned(before, pipe)


@cuda
@pytest.mark.cuda
def test_cuda_sequential_matches_plain_backprop():
    model, (xs, ys) = make_model(), stream()
    xs_c, ys_c = [x.cuda() for x in xs], [y.cuda() for y in ys]
    make_opt = lambda p: torch.optim.SGD(p, lr=0.05)  # noqa: E731
    with Pipeline(
        model, xs_c[0], balance=[3, 2], devices=["cuda:0"], loss_fn=mse, optimizer=make_opt, schedule="sequential"
    ) as pipe:
        outputs, losses = run(pipe, xs_c, ys_c)
        want_out, want_loss, want_model = ref.plain_loop(model, make_opt, mse, xs, ys)
        assert_close_dicts(losses, want_loss, tol=1e-5)
        assert_same_weights(pipe, [want_model], tol=1e-5)
