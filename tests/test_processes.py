"""runtime="processes" (one worker process per stage, gloo between them) against runtime="local".

Both runtimes execute the same plans through the same interpreter, so with one intra-op thread per
stage they must agree to the last bit; the tolerance only leaves room for nothing. Start-up costs
seconds per pipeline (each worker imports torch), so each test reuses its pipeline for everything.
"""

from __future__ import annotations

import functools
import gc
import multiprocessing as mp
import os
import signal
import threading
import time

import pytest
import torch
from torch import nn

from pipeline_core import Pipeline, PipelineError, stage_process
from pipeline_core import processes as processes_module

STEPS = 22
TOL = 1e-6
BALANCE = [2, 2]

OPTIMIZERS = {
    "sgd": functools.partial(torch.optim.SGD, lr=0.05, momentum=0.9),
    "adam": functools.partial(torch.optim.Adam, lr=1e-2),
}


def loss_fn(out: torch.Tensor, target: torch.Tensor | None) -> torch.Tensor:
    """Supervised when a target comes with the frame, unsupervised otherwise."""
    return out.pow(2).mean() if target is None else (out - target).pow(2).mean()


pytestmark = [pytest.mark.realtime, pytest.mark.usefixtures("one_intra_op_thread")]


def make_model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), nn.Tanh()),
        nn.Sequential(nn.Conv2d(6, 6, 3, padding=1), nn.Tanh()),
        nn.Sequential(nn.Conv2d(6, 6, 3, padding=1), nn.Tanh()),
        nn.Conv2d(6, 2, 3, padding=1),
    )


def stream(n: int, seed: int = 1):
    """Frames with a target on even frames only: both loss paths run."""
    gen = torch.Generator().manual_seed(seed)
    xs = [torch.rand(1, 3, 8, 8, generator=gen) for _ in range(n)]
    ys = [torch.rand(1, 2, 8, 8, generator=gen) if i % 2 == 0 else None for i in range(n)]
    return xs, ys


def run(pipe: Pipeline, xs, ys):
    results = [pipe.step(x, y) for x, y in zip(xs, ys, strict=True)] + pipe.flush()
    return {r.frame: (r.output, r.loss) for r in results if r.frame is not None}


def assert_same_results(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b) and a
    for frame in a:
        torch.testing.assert_close(a[frame][0], b[frame][0], atol=TOL, rtol=0)
        assert abs(a[frame][1] - b[frame][1]) <= TOL, frame


def assert_same_state(a: Pipeline, b: Pipeline) -> None:
    for (name, wa), (_, wb) in zip(a.module().state_dict().items(), b.module().state_dict().items(), strict=True):
        torch.testing.assert_close(wa, wb, atol=TOL, rtol=0, msg=name)
    sa, sb = a.state_dict(), b.state_dict()
    assert sa["frames"] == sb["frames"]
    for stage_a, stage_b in zip(sa["stages"], sb["stages"], strict=True):
        for state_a, state_b in zip(
            stage_a["optimizer"]["state"].values(), stage_b["optimizer"]["state"].values(), strict=True
        ):
            for key in state_a:
                torch.testing.assert_close(state_a[key], state_b[key], atol=TOL, rtol=0, msg=key)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def processes(timeout: float = 60.0, **kw) -> Pipeline:
    x = torch.zeros(1, 3, 8, 8)
    kw.setdefault("optimizer", OPTIMIZERS["sgd"])
    return Pipeline(make_model(), x, balance=BALANCE, loss_fn=loss_fn, runtime="processes", timeout=timeout, **kw)


@pytest.mark.parametrize("opt", sorted(OPTIMIZERS))
@pytest.mark.parametrize("schedule", ["partime", "sequential", "stash"])
def test_processes_compute_what_local_computes(schedule, opt):
    xs, ys = stream(STEPS + 8)
    kw = dict(balance=BALANCE, loss_fn=loss_fn, optimizer=OPTIMIZERS[opt], schedule=schedule)
    with (
        Pipeline(make_model(), xs[0], runtime="local", **kw) as local,
        Pipeline(make_model(), xs[0], runtime="processes", timeout=60, **kw) as procs,
    ):
        pids = procs.runtime.pids()
        assert len(pids) == 2 and all(alive(p) for p in pids)
        # Outputs, losses, weights and optimizer state after >= 20 steps and a flush.
        assert_same_results(run(local, xs[:STEPS], ys[:STEPS]), run(procs, xs[:STEPS], ys[:STEPS]))
        assert_same_state(local, procs)
        # The rest of the API goes to the workers too: learning rate, then loading weights.
        local.set_lr(0.01)
        procs.set_lr(0.01)
        local.set_group_options("lr", {"lr_scale": 2.0})
        procs.set_group_options("lr", {"lr_scale": 2.0})
        assert all(g["lr"] == 0.02 for s in procs.state_dict()["stages"] for g in s["optimizer"]["param_groups"])
        assert_same_results(run(local, xs[STEPS:], ys[STEPS:]), run(procs, xs[STEPS:], ys[STEPS:]))
        checkpoint = make_state(opt)
        local.load_state_dict(checkpoint)
        procs.load_state_dict(checkpoint)
        assert_same_results(run(local, xs[:4], ys[:4]), run(procs, xs[:4], ys[:4]))
        assert_same_state(local, procs)
    assert not any(alive(p) for p in pids), "close() left worker processes behind"


def make_state(opt: str) -> dict:
    """A checkpoint from a differently trained pipeline (the local runtime: no second spawn)."""
    xs, ys = stream(6, seed=7)
    with Pipeline(make_model(), xs[0], balance=BALANCE, loss_fn=loss_fn, optimizer=OPTIMIZERS[opt]) as other:
        run(other, xs, ys)
        return other.state_dict()


class _Cycle:
    """Garbage of the controller's, a reference cycle; its finalizer writes down the process that ran it."""

    def __init__(self, marks) -> None:
        self.marks, self.me = marks, self

    def __del__(self) -> None:
        with open(self.marks, "a") as f:
            f.write(f"{os.getpid()}\n")


_CONTROLLER = os.getpid()


class _Collects(nn.Module):
    """Unpickled in a worker, before it settles (``settle_process``), runs the garbage collector, as a worker's own
    allocations may then."""

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)
        if os.getpid() != _CONTROLLER:
            gc.collect()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


def test_a_forked_worker_never_collects_the_controller_s_garbage(tmp_path):
    """The service forks its stage workers from the learner (``STAGE_START_METHOD``): a worker collecting a cycle the
    controller had not collected yet runs its finalizer where its threads and sockets are not (a worker forked from
    the test process died of a segmentation fault while collecting). Only the controller finalizes its garbage."""
    marks = tmp_path / "finalized"
    torch.manual_seed(0)
    model = nn.Sequential(nn.Sequential(nn.Conv2d(3, 2, 3, padding=1), _Collects()), nn.Sequential(_Collects()))
    gc.disable()  # the cycle stays uncollected in the controller while the workers run
    try:
        _Cycle(marks)
        with Pipeline(model, torch.zeros(1, 3, 8, 8), balance=[1, 1], loss_fn=loss_fn, runtime="processes",
                      start_method="fork", timeout=60.0) as pipe:  # fmt: skip
            for x in stream(3)[0]:
                pipe.step(x)
            pipe.flush()
        finalized = marks.read_text().split() if marks.exists() else []
    finally:
        gc.enable()
    assert finalized == [], f"finalized in {finalized}, the controller is {os.getpid()}"
    gc.collect()
    assert marks.read_text().split() == [str(os.getpid())]


def test_a_killed_worker_is_an_error_naming_its_stage_not_a_hang():
    xs, _ = stream(4)
    pipe = processes()
    pids = pipe.runtime.pids()
    for x in xs:
        pipe.step(x)
    os.kill(pids[1], signal.SIGKILL)
    start = time.monotonic()
    with pytest.raises(PipelineError, match=r"stage 1 worker \(pid \d+\) died from signal SIGKILL"):
        pipe.step(xs[0])
    assert time.monotonic() - start < 10
    assert not any(alive(p) for p in pids), "the other workers must be stopped"
    with pytest.raises(PipelineError, match="stopped after a failure"):
        pipe.step(xs[0])
    pipe.close()  # still fine


def test_a_hung_worker_is_an_error_within_the_timeout():
    xs, _ = stream(4)
    pipe = processes(timeout=3.0)
    pids = pipe.runtime.pids()
    for x in xs:
        pipe.step(x)
    os.kill(pids[0], signal.SIGSTOP)
    start = time.monotonic()
    with pytest.raises(PipelineError, match=r"stage 0 did not answer within \d+s") as err:
        pipe.step(xs[0])
    assert time.monotonic() - start < 3.0 + 5
    assert "stage 1 failed" in str(err.value)  # its neighbour gave up waiting for it
    assert not any(alive(p) for p in pids), "a stopped worker must be killed too"


def test_lambda_loss_and_closure_optimizer_factory_run_in_processes():
    """What docs/engine.md shows: a loss written inline and an optimizer factory closing over its rate."""
    lr = 0.05

    def optimizer(params):
        return torch.optim.SGD(params, lr=lr, momentum=0.9)

    xs, ys = stream(10)
    inline = lambda out, target: out.pow(2).mean() if target is None else (out - target).pow(2).mean()  # noqa: E731
    kw = dict(balance=BALANCE, loss_fn=inline, optimizer=optimizer)
    with (
        Pipeline(make_model(), xs[0], runtime="local", **kw) as local,
        Pipeline(make_model(), xs[0], runtime="processes", timeout=60, **kw) as procs,
    ):
        assert_same_results(run(local, xs, ys), run(procs, xs, ys))
        assert_same_state(local, procs)


def test_unpicklable_loss_is_refused_before_any_process_starts():
    lock = threading.Lock()

    def loss_under_lock(out, target):
        with lock:
            return out.sum()

    with pytest.raises(ValueError, match="picklable"):
        Pipeline(make_model(), torch.zeros(1, 3, 8, 8), balance=BALANCE, loss_fn=loss_under_lock, runtime="processes")


def test_unknown_runtime_is_refused():
    with pytest.raises(ValueError, match="unknown runtime"):
        Pipeline(make_model(), torch.zeros(1, 3, 8, 8), balance=BALANCE, runtime="fibers")


def test_a_start_method_is_for_processes_only():
    with pytest.raises(ValueError, match="start_method"):
        Pipeline(make_model(), torch.zeros(1, 3, 8, 8), balance=BALANCE, runtime="local", start_method="fork")


def test_micro_batch_schedules_are_refused():
    with pytest.raises(ValueError, match="micro-batches"):
        Pipeline(
            make_model(),
            torch.zeros(2, 3, 8, 8),
            balance=BALANCE,
            loss_fn=loss_fn,
            schedule="gpipe",
            runtime="processes",
        )


def test_the_workers_are_forked_before_their_rendezvous_serves(monkeypatch):
    """The store the workers meet at serves from a thread of its own: a worker forked (the service's way,
    ``STAGE_START_METHOD``) while that thread held a lock would hang at its start. So the store is made once every
    worker is forked, and they are sent its port."""
    before = set(mp.active_children())
    forked_when_made = []
    real_store = processes_module.dist.TCPStore

    def store(*args, **kwargs):
        forked_when_made.append(len(set(mp.active_children()) - before))
        return real_store(*args, **kwargs)

    monkeypatch.setattr(processes_module.dist, "TCPStore", store)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 2, 3, padding=1), nn.Conv2d(2, 2, 3, padding=1))
    with Pipeline(model, torch.zeros(1, 3, 8, 8), balance=[1, 1], loss_fn=loss_fn, runtime="processes",
                  start_method="fork", timeout=60.0) as pipe:  # fmt: skip
        pipe.step(torch.rand(1, 3, 8, 8))
        pipe.flush()
    assert forked_when_made[0] == 2


class _SlowToLoad(nn.Identity):
    """A stage whose unpickling in its worker takes a second: a start-up that stalls."""

    def __setstate__(self, state: dict) -> None:
        time.sleep(1.0)
        super().__setstate__(state)


def test_a_worker_slow_to_start_prints_where_it_waits(monkeypatch, capfd):
    """A start-up that hangs is an error naming the stage after ``START_TIMEOUT``; before that the worker prints its
    stacks, so the log says where it waited (a forked worker sees this test's shorter ``SLOW_START_S``)."""
    monkeypatch.setattr(stage_process, "SLOW_START_S", 0.3)
    model = nn.Sequential(nn.Conv2d(3, 2, 3, padding=1), _SlowToLoad())
    with Pipeline(model, torch.zeros(1, 3, 8, 8), balance=[1, 1], runtime="processes", start_method="fork",
                  timeout=60.0) as pipe:  # fmt: skip
        pipe.step(torch.rand(1, 3, 8, 8))
        pipe.flush()
    err = capfd.readouterr().err
    assert "in __setstate__" in err and "in stage_process_main" in err
