"""The process runtime: one worker process per stage on this machine, real parallelism on CPU cores.

The controller (the process that owns the ``Pipeline``) starts one worker per stage once, hands each
its ``Stage`` (module + optimizer, pickled) and then, per step, the schedule's plan plus the frames
and targets it feeds. Workers exchange activations and gradients among themselves over
torch.distributed (gloo, ``dist_transport.py``) and run their actions through the same interpreter
as every other runtime (``worker.py``; a worker's own side is ``stage_process.py``). Commands and
small results (outputs, losses, timings) travel over one pipe per worker, so the controller holds no
process group and a failed or vanished worker is seen at once (its pipe or process sentinel)
instead of as a hang.

Any failure (a worker raising, dying, or not answering within the timeout) stops every worker and
raises a ``PipelineError`` naming the stage; the pipeline cannot be used afterwards.
"""

from __future__ import annotations

import contextlib
import gc
import pickle
import queue
import signal
import threading
import time
import weakref
from collections import deque
from collections.abc import Iterator
from multiprocessing.connection import Connection, wait
from typing import Any, NoReturn

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import Tensor, nn

from . import stage_process
from .contracts import StepRecord
from .errors import PipelineError
from .interpreter import messages_to
from .partition import TensorMeta
from .schedules import StepActions
from .stage import LossFn, Stage
from .stage_process import WorkerSpec, dumps, recv, send, stage_process_main

#: Workers are forked from multiprocessing's fork server: a clean process (no threads, no torch
#: state) started once per controller and preloaded with torch, so after the first pipeline a
#: pipeline starts in a fraction of a second instead of seconds (spawn re-imports torch each time).
START_METHOD = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
PRELOAD = ["torch", "torch._dynamo", stage_process.__name__]
#: How long to wait for workers to start (the fork server imports torch: seconds on a loaded machine).
START_TIMEOUT = 120.0
#: How long a closing worker may take to exit before it is terminated.
EXIT_TIMEOUT = 5.0
#: After a first failure, how long to wait for the other workers' news (to find the root cause).
FAILURE_GRACE = 2.0


class _Deliveries:
    """Frames and targets fed between steps; they go to their stage with the next step's command."""

    def __init__(self, learn: bool) -> None:
        self.learn = learn
        self.pending: list[tuple[str, int, int, Tensor]] = []

    def add(self, kind: str, stage: int, frame: int, tensor: Tensor) -> None:
        if kind == "target" and not self.learn:
            return  # only a loss reads a target
        self.pending.append((kind, stage, frame, tensor.detach().cpu()))

    def take(self, stage: int) -> list[tuple[str, int, Tensor]]:
        mine = [(kind, frame, t) for kind, s, frame, t in self.pending if s == stage]
        self.pending = [m for m in self.pending if m[1] != stage]
        return mine


class _Outbox:
    """Sends one worker its commands from a thread. A worker may still be busy with its previous
    step when the next command comes, and a command with a large frame fills the pipe's buffer:
    the controller must not block on that (nor forever on a hung worker)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self._queue: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="pipeline-outbox", daemon=True)
        self._thread.start()

    def put(self, command: Any) -> None:
        self._queue.put(dumps(command))  # pickled now: later changes to the tensors do not leak in

    def _run(self) -> None:
        while (data := self._queue.get()) is not None:
            try:
                self.conn.send_bytes(data)
            except (OSError, ValueError):
                return  # the worker is gone: the controller's wait reports it

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(EXIT_TIMEOUT)
        self.conn.close()


def _stop(procs: list[mp.Process], outboxes: list[_Outbox], graceful: bool) -> None:
    """End every worker: ask politely (``graceful``), then kill. Leaves no process behind."""
    if graceful:
        for outbox in outboxes:
            outbox.put(("close", ()))
        deadline = time.monotonic() + EXIT_TIMEOUT
        for proc in procs:
            proc.join(max(0.0, deadline - time.monotonic()))
    for proc in procs:
        if proc.is_alive():
            proc.kill()  # SIGKILL: also ends a stopped (SIGSTOP) or hung worker
    for proc in procs:
        proc.join(EXIT_TIMEOUT)
    for outbox in outboxes:
        outbox.close()


@contextlib.contextmanager
def _frozen_for(method: str) -> Iterator[None]:
    """A forked worker must never collect the controller's objects: its garbage collector would finalize cycles the
    controller had not collected yet, in a process without the controller's threads (a worker forked from the test
    process died of a segmentation fault collecting before it settled). Frozen (``gc.freeze``) while a worker forks,
    they are in its permanent generation, as Python's documentation advises for ``fork``."""
    if method != "fork":
        yield
        return
    frozen_before = gc.get_freeze_count()
    gc.freeze()
    try:
        yield
    finally:
        if not frozen_before:
            gc.unfreeze()


class ProcessRuntime:
    """Controller side of the process runtime: a ``Runtime`` (``contracts.py``) like ``LocalRuntime``."""

    cuda = False

    def __init__(
        self,
        stages: list[Stage],
        loss_fn: LossFn | None,
        metas: list[TensorMeta],
        slots: int,
        timeout: float,
        start_method: str | None = None,
        start_early: bool = False,
    ) -> None:
        """``metas``: shape and dtype of the pipeline input, then of every stage's output; ``slots``:
        receive buffers per kind of message (the schedule's messages in flight); ``start_method``: how the workers
        start (multiprocessing's; default ``START_METHOD``); ``start_early``: ``run_step`` sends the stages after
        the first the following step's part as soon as a step is done (``starts_early``)."""
        self.starts_early = start_early
        self._started: tuple[int, StepActions] | None = None  # the step the later stages were sent early, its plan
        if any(s.device.type != "cpu" for s in stages):
            raise ValueError("runtime='processes' runs CPU stages over gloo; for CUDA devices use runtime='local'")
        self.depth = len(stages)
        self.timeout = timeout
        self._deliveries = _Deliveries(learn=loss_fn is not None)
        self._failure: str | None = None
        payloads = [self._payload(stage, loss_fn) for stage in stages]
        threads = max(1, torch.get_num_threads() // self.depth)  # this process's budget, shared out
        method = start_method or START_METHOD
        ctx = mp.get_context(method)
        if method == "forkserver":
            ctx.set_forkserver_preload(PRELOAD)
        self._procs: list[mp.Process] = []
        self._conns: list[Connection] = []
        for h, payload in enumerate(payloads):
            spec = WorkerSpec(h, self.depth, payload, metas[h], metas[h + 1], threads, slots, timeout)
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=stage_process_main, args=(spec, child), name=f"pipeline-stage-{h}", daemon=True)
            with _frozen_for(method):
                proc.start()
            child.close()
            self._procs.append(proc)
            self._conns.append(parent)
        # The workers' rendezvous, on loopback, made once every worker is forked: a store serves from a thread of its
        # own, and a worker forked while that thread held a lock would wait on it for ever.
        self._store: dist.TCPStore | None = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
        for conn in self._conns:
            with contextlib.suppress(OSError):  # a worker already gone: its sentinel says how, below
                send(conn, self._store.port)
        self._outboxes = [_Outbox(conn) for conn in self._conns]
        # Workers are ended even if close() is never called (garbage collection, interpreter exit).
        self._finalizer = weakref.finalize(self, _stop, self._procs, self._outboxes, True)
        self._owed: list[deque[str]] = [deque(["start"]) for _ in stages]  # answers each worker owes
        self._seconds: list[float | None] = [None] * self.depth
        self._outputs: dict[int, Tensor] = {}
        self._losses: dict[int, Tensor] = {}
        self._readings: dict[str, Tensor] = {}
        self._gather("start-up", max(timeout, START_TIMEOUT), lag=[0] * self.depth)

    @staticmethod
    def _payload(stage: Stage, loss_fn: LossFn | None) -> bytes:
        try:
            return dumps((stage, loss_fn))
        except (pickle.PicklingError, AttributeError, TypeError) as exc:
            raise ValueError(
                "runtime='processes' sends each stage (module, optimizer) and loss_fn to a worker process, so "
                f"they must be picklable by cloudpickle (lambdas and closures are; locks, open files and sockets "
                f"are not): {exc}"
            ) from exc

    # -- running -------------------------------------------------------------------------------
    def feed(self, kind: str, stage: int, frame: int, tensor: Tensor) -> None:
        """Frames and targets go to their worker with the next step's command."""
        self._deliveries.add(kind, stage, frame, tensor)

    def run_step(self, step: int, plan: StepActions, following: StepActions | None = None) -> StepRecord:
        """Send every worker its step; return once the last stage has done it.

        Earlier stages may still be finishing it: each reads its next command from its pipe as soon
        as it is done, so no stage idles while another finishes (a per-step barrier would make every
        step as long as the slowest stage *in that step*). They run at most one step behind; their
        ``stage_seconds`` are those of the latest step they finished.

        ``following`` (where ``starts_early``): the next step's plan. The stages after the first are sent their part
        of it once this step is done, while the host still prepares the frame the first one needs: they would
        otherwise wait the host's time out idle, as the last stage may not lag. The first stage posts, after this
        step, the receives of what they send it then. Calls between steps wait for that early part too."""
        later = range(1, self.depth)
        early = self._started is not None and self._started[0] == step  # the later stages have this step already
        if early and self._started[1][1:] != plan[1:]:
            raise PipelineError(f"step {step}: the stages after the first began it early with other actions than it "
                                "has (the schedule's later_stages_ahead does not hold)")  # fmt: skip
        after = [] if following is None else messages_to(following, 0)  # only later stages send to the first
        self._send(0, "step", (plan, self._deliveries.take(0), None, after))
        for h in [] if early else later:
            self._send(h, "step", (plan, self._deliveries.take(h), None, []))
        self._gather(f"step {step}", self.timeout, lag=[1] * (self.depth - 1) + [0])
        record = StepRecord(self._outputs, self._losses, list(self._seconds), readings=self._readings)
        self._outputs, self._losses, self._readings = {}, {}, {}
        self._started = None
        if following is not None:
            for h in later:  # what the first stage sends them in this step (now certain), and the others in the next
                receives = [m for m in messages_to(plan, h) if m[2] == 0]
                receives += [m for m in messages_to(following, h) if m[2] > 0]
                self._send(h, "step", (following, self._deliveries.take(h), receives, []))
            self._started = (step + 1, following)
        return record

    def new_epoch(self) -> None:
        self._deliveries.pending.clear()
        self._call("new_epoch", [()] * self.depth)
        self._outputs, self._losses, self._readings, self._started = {}, {}, {}, None  # what a step started early left

    def state_dicts(self) -> list[dict]:
        return self._call("state_dict", [()] * self.depth)

    def load_state_dicts(self, states: list[dict]) -> None:
        if len(states) != self.depth:
            raise ValueError(f"checkpoint has {len(states)} stages, the pipeline {self.depth}")
        self._call("load_state_dict", [(state,) for state in states])

    def set_lr(self, lrs: list[float]) -> None:
        self._call("set_lr", [(lr,) for lr in lrs])

    def set_group_options(self, holding: str, options: dict[str, float]) -> None:
        self._call("set_group_options", [(holding, dict(options))] * self.depth)

    def modules(self) -> list[nn.Module]:
        return self._call("module", [()] * self.depth)

    # -- talking to the workers ----------------------------------------------------------------
    def _call(self, name: str, args: list[tuple]) -> list[Any]:
        """Send one command per worker and return their answers (after any step still owed)."""
        self._send_all(name, args)
        answers = self._gather(name, self.timeout, lag=[0] * self.depth)
        return [answers[h] for h in range(self.depth)]

    def _send_all(self, name: str, args: list[tuple]) -> None:
        for h in range(self.depth):
            self._send(h, name, args[h])

    def _send(self, h: int, name: str, args: tuple) -> None:
        if self._failure is not None:
            raise PipelineError(f"the pipeline stopped after a failure: {self._failure}")
        if not self._finalizer.alive:
            raise PipelineError("the pipeline is closed")
        self._outboxes[h].put((name, args))
        self._owed[h].append(name)

    def _gather(self, what: str, timeout: float, lag: list[int]) -> dict[int, Any]:
        """Read answers until worker h owes at most ``lag[h]``; step answers are absorbed into the
        next record, the others returned. Once a worker fails, dies or stays silent: ``PipelineError``.

        After a first failure every worker owes everything, within ``FAILURE_GRACE``: a worker
        killed by a signal makes its neighbours fail too, and the report should name the root cause."""
        answers: dict[int, Any] = {}
        errors: dict[int, str] = {}
        conns = {conn: h for h, conn in enumerate(self._conns)}
        deadline = time.monotonic() + timeout + FAILURE_GRACE
        failing = False
        while True:
            dead = {h for h, proc in enumerate(self._procs) if proc.exitcode is not None}
            if not failing and (errors or dead):
                failing, lag = True, [0] * self.depth
                deadline = min(deadline, time.monotonic() + FAILURE_GRACE)
            behind = [h for h in range(self.depth) if len(self._owed[h]) > lag[h] and not {h} & (dead | errors.keys())]
            remaining = deadline - time.monotonic()
            if not behind or remaining <= 0:
                break
            readable = [c for c, h in conns.items() if self._owed[h] and h not in errors]
            sentinels = [proc.sentinel for h, proc in enumerate(self._procs) if h not in dead]
            for obj in wait(readable + sentinels, timeout=remaining):
                if obj not in conns:
                    continue  # a death: seen at the top of the loop
                h = conns[obj]
                try:
                    status, value = recv(obj)
                except (EOFError, OSError):
                    del conns[obj]  # it died: its sentinel will tell how
                    continue
                name = self._owed[h].popleft()
                if status != "ok":
                    errors[h] = value
                elif name == "step":
                    self._absorb(h, *value)
                else:
                    answers[h] = value
        if failing or behind:
            self._fail(what, errors, timeout)
        return answers

    def _absorb(self, h: int, seconds: float | None, outputs: dict, losses: dict, readings: dict) -> None:
        self._seconds[h] = seconds
        self._outputs.update(outputs)
        self._losses.update(losses)
        self._readings.update(readings)

    def _fail(self, what: str, errors: dict[int, str], timeout: float) -> NoReturn:
        """Name what went wrong, stage by stage (deaths and silences first: they are root causes)."""
        dead, silent, failed = [], [], []
        for h, proc in enumerate(self._procs):
            if h in errors:
                failed.append(f"stage {h} failed: {errors[h]}")
            elif proc.exitcode is not None:
                dead.append(f"stage {h} worker (pid {proc.pid}) died {_exit_reason(proc.exitcode)}")
            elif self._owed[h]:
                silent.append(f"stage {h} did not answer within {timeout:.0f}s (hung?)")
        self._failure = f"during {what}: " + "; ".join(dead + silent + failed)
        self.close()
        raise PipelineError(self._failure)

    # -- lifetime ------------------------------------------------------------------------------
    def close(self) -> None:
        """End every worker (idempotent); after a failure they are killed without asking."""
        if not self._finalizer.alive:
            return
        if self._failure is None:  # stages still finishing the last step must not lose its messages
            with contextlib.suppress(PipelineError):  # (a failure here has already stopped everything)
                self._gather("close", self.timeout, lag=[0] * self.depth)
        if self._finalizer.alive:
            self._finalizer.detach()
            _stop(self._procs, self._outboxes, graceful=self._failure is None)
        self._store = None  # its serving thread ends with it

    def pids(self) -> list[int]:
        return [proc.pid for proc in self._procs if proc.pid is not None]


def _exit_reason(code: int) -> str:
    if code < 0:
        return f"from signal {signal.Signals(-code).name}"
    return f"with exit code {code}"
