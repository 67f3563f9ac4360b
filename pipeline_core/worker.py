"""One stage in its own process: runs its part of every step through the shared interpreter.

Used by both process runtimes: ``processes.py`` (a controller on this machine sends commands over
a pipe) and ``launch.py`` (torchrun ranks, possibly on several machines). Either way the stage's
actions come from the schedule's plan and run through ``Interpreter``; only the transport differs
from the single-process runtime.
"""

from __future__ import annotations

import gc
import importlib
import time
from collections.abc import Sequence

import torch

from .contracts import StepRecord
from .dist_transport import DistTransport
from .interpreter import Interpreter, Message, messages_to
from .partition import TensorMeta
from .schedules import Schedule, StepActions
from .stage import LossFn, Stage


def prepare_process(threads: int) -> None:
    """What every stage process does before its first frame.

    Set its intra-op thread budget (a fresh process would take every core, and D of them on the
    same cores run several times slower); import torch._dynamo, which the first optimizer step
    would otherwise import mid-stream (seconds).
    """
    torch.set_num_threads(threads)
    importlib.import_module("torch._dynamo")


def settle_process() -> None:
    """Once set up: torch's objects are here for good, so no garbage collection (nor the final
    one at exit) should spend seconds scanning them while frames stream."""
    gc.freeze()


def check_whole_frames(schedule: Schedule) -> None:
    """Receive buffers are sized for whole frames: refuse schedules that send micro-batches."""
    if any(a.chunks > 1 for actions in schedule.actions(0, None, learn=True) for a in actions):
        raise ValueError(
            f"stage processes exchange whole frames; schedule {schedule.name!r} splits them into "
            "micro-batches: use runtime='local'"
        )


class StageWorker:
    def __init__(
        self,
        stage: Stage,
        depth: int,
        transport: DistTransport,
        loss_fn: LossFn | None,
        input_meta: TensorMeta,
        output_meta: TensorMeta,
        slots: int,
    ) -> None:
        self.stage = stage
        self.depth = depth
        self.transport = transport
        self.interpreter = Interpreter({stage.index: stage}, transport, loss_fn, depth - 1)
        # What arrives from the neighbours: activations shaped like this stage's input, gradients
        # shaped like its output.
        self._metas = {"act": input_meta, "grad": output_meta}
        self.slots = slots  # receive buffers per kind: the schedule's messages in flight

    def run_step(self, plan: StepActions, receives: Sequence[Message] | None = None,
                 receives_after: Sequence[Message] = ()) -> StepRecord:  # fmt: skip
        """Post the receives of every message the neighbours send this step (``receives``: those given instead), run
        this stage's actions, post ``receives_after``, and return once everything it sent has been delivered.

        The two lists are ``ProcessRuntime``'s when it starts the stages after the first early: a stage started early
        receives what the first one sends in a step only once the first one has been sent that step, and the first
        one receives, after its step, what the stages started early send it in the next."""
        h = self.stage.index
        self.post(messages_to(plan, h) if receives is None else receives)
        record = self.interpreter.record = StepRecord(stage_seconds=[None] * self.depth)
        start, receiving = time.perf_counter(), self.transport.receiving_s
        try:
            for action in plan[h]:
                self.interpreter.run(h, action)
        finally:
            self.stage.end_step()
        if plan[h]:  # busy: what it waited for its neighbours' messages left out
            record.stage_seconds[h] = time.perf_counter() - start - (self.transport.receiving_s - receiving)
        self.post(receives_after)
        self.transport.finish_sends()
        return record

    def post(self, messages: Sequence[Message]) -> None:
        """Post the receives of ``messages`` not posted yet."""
        for kind, frame, sender in messages:
            if not self.transport.ready(kind, self.stage.index, frame):
                self.transport.post(kind, frame, sender, self._metas[kind], self.slots)

    def new_epoch(self) -> None:
        self.transport.drain()
        self.stage.reset()
