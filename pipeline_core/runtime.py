"""The single-process runtime: executes any schedule's actions on the stages of this process.

Two executors share the action interpreter (``interpreter.py``):

* **threads** (CPU): one thread per stage, each with its own intra-op thread budget; torch ops
  release the GIL, so stages really compute at the same time. A receive blocks until the message
  is there (or a timeout names the stage).
* **streams** (CUDA): one host thread enqueues every stage's actions on that stage's stream in a
  dependency-respecting round robin; the GPU runs the streams concurrently. The same enqueueing
  is what a CUDA graph captures (see ``cuda_graph.py``).
"""

from __future__ import annotations

import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import torch
from torch import Tensor, nn

from .contracts import StepRecord
from .errors import PipelineError
from .interpreter import Interpreter
from .schedules import Action, StepActions
from .stage import LossFn, Stage
from .transport import LocalTransport, Streams


class LocalRuntime:
    """The ``Runtime`` (``contracts.py``) of stages that all live in this process."""

    starts_early = False  # its stages run in the caller's thread or on its CUDA streams

    def __init__(self, stages: list[Stage], loss_fn: LossFn | None, slots: int, timeout: float) -> None:
        self.stages = stages
        self.cuda = all(s.device.type == "cuda" for s in stages)
        if any(s.device.type == "cuda" for s in stages) and not self.cuda:
            raise ValueError("mixing CPU and CUDA stages is not supported: use all 'cpu' or all 'cuda:N'")
        self.streams = [Streams(s.device) for s in stages] if self.cuda else None
        self.transport = LocalTransport([s.device for s in stages], self.streams, slots, timeout)
        self.interpreter = Interpreter(dict(enumerate(stages)), self.transport, loss_fn, len(stages) - 1)
        self._pool: ThreadPoolExecutor | None = None
        if not self.cuda and len(stages) > 1:
            # Split this process's intra-op budget between the stages that now run at once.
            threads = max(1, torch.get_num_threads() // len(stages))
            self._pool = ThreadPoolExecutor(
                len(stages), thread_name_prefix="stage", initializer=torch.set_num_threads, initargs=(threads,)
            )

    # -- executors -----------------------------------------------------------------------------
    def feed(self, kind: str, stage: int, frame: int, tensor: Tensor) -> None:
        self.transport.deliver(kind, stage, frame, tensor)

    def run_step(self, step: int, plan: StepActions) -> StepRecord:
        record = self.interpreter.record = StepRecord(stage_seconds=[None] * len(self.stages))
        self.transport.step = step
        try:
            if self.cuda:
                with self.cuda_step():
                    self.enqueue(plan)
            elif self._pool is not None:
                self._run_threads(plan)
            else:
                self._run_stage_timed(0, plan[0])
        finally:
            for stage in self.stages:
                stage.end_step()
        return record

    def _run_stage_timed(self, h: int, actions: list[Action]) -> None:
        start = time.perf_counter()
        for action in actions:
            self.interpreter.run(h, action)
        if actions:
            self.interpreter.record.stage_seconds[h] = time.perf_counter() - start

    def _run_stage_guarded(self, h: int, actions: list[Action]) -> None:
        try:
            self._run_stage_timed(h, actions)
        except BaseException as exc:
            self.transport.abort(exc)
            raise

    def _run_threads(self, plan: StepActions) -> None:
        assert self._pool is not None
        futures = [self._pool.submit(self._run_stage_guarded, h, acts) for h, acts in enumerate(plan)]
        errors = []
        for h, fut in enumerate(futures):
            try:
                fut.result()
            except PipelineError as exc:
                errors.append((h, exc))
            except Exception as exc:  # the root cause: report it, naming the stage
                errors.insert(0, (h, exc))
        if errors:
            self.transport.clear()
            h, exc = errors[0]
            raise PipelineError(f"stage {h} failed: {exc}") from exc

    def enqueue(self, plan: StepActions) -> None:
        """Round robin over stages, running each stage's next action once its input is there."""
        pending = [deque(acts) for acts in plan]
        while any(pending):
            progressed = False
            for h, queue in enumerate(pending):
                with self.on_stage(h):
                    while queue and self.interpreter.is_ready(h, queue[0]):
                        self.interpreter.run(h, queue.popleft())
                        progressed = True
            if not progressed:
                stuck = {h: str(q[0]) for h, q in enumerate(pending) if q}
                raise PipelineError(f"schedule cannot progress: stages wait on messages never sent: {stuck}")

    @contextmanager
    def on_stage(self, h: int):
        """Make stage h's device and compute stream current (nothing to do on CPU)."""
        if self.streams is None:
            yield
            return
        with torch.cuda.device(self.stages[h].device), torch.cuda.stream(self.streams[h].compute):
            yield

    @contextmanager
    def cuda_step(self):
        """Fork every stage stream from the current one, and join them back at the end.

        Steps are thus totally ordered (what a step sends is safe to read in the next one), and a
        graph capture of the step sees one connected piece of work. Outside a capture, events on
        each stage's compute stream time it (``StepRecord.stage_events``; read when asked)."""
        assert self.streams is not None
        main = torch.cuda.current_stream(self.stages[0].device)
        timed = not torch.cuda.is_current_stream_capturing()
        starts = []
        for s in self.streams:
            for stream in s.all():
                stream.wait_stream(main)
            if timed:
                starts.append(torch.cuda.Event(enable_timing=True))
                starts[-1].record(s.compute)
        yield
        ends = []
        for s in self.streams:
            if timed:
                ends.append(torch.cuda.Event(enable_timing=True))
                ends[-1].record(s.compute)
            for stream in s.all():
                main.wait_stream(stream)
        if timed:
            self.interpreter.record.stage_events = list(zip(starts, ends, strict=True))

    # -- the stages' state ------------------------------------------------------------------------
    def new_epoch(self) -> None:
        """Forget every message and frame in flight (after a flush or a weight load)."""
        self.transport.clear()
        for stage in self.stages:
            stage.reset()

    def state_dicts(self) -> list[dict]:
        return [stage.state_dict() for stage in self.stages]

    def load_state_dicts(self, states: list[dict]) -> None:
        for stage, state in zip(self.stages, states, strict=True):
            stage.load_state_dict(state)

    def set_lr(self, lrs: list[float]) -> None:
        for stage, lr in zip(self.stages, lrs, strict=True):
            stage.set_lr(lr)

    def set_group_options(self, holding: str, options: dict[str, float]) -> None:
        for stage in self.stages:
            stage.set_group_options(holding, options)

    def modules(self) -> list[nn.Module]:
        return [stage.module for stage in self.stages]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
