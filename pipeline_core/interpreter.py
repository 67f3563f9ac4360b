"""The one action interpreter: what each schedule action does to a stage.

Every runtime (threads, CUDA streams, CUDA graphs, one process per stage) executes schedules
through this class; runtimes differ only in how they order actions and in their ``Transport`` (``contracts.py``).
"""

from __future__ import annotations

from collections.abc import Mapping

from torch import Tensor

from .contracts import StepRecord, Transport
from .microbatch import scatter
from .schedules import SENDS, Action, Op, StepActions
from .stage import LossFn, Stage

#: A message between stages: ``(kind, frame, sending stage)``.
Message = tuple[str, int, int]


def messages_to(plan: StepActions, h: int) -> list[Message]:
    """``(kind, frame, sending stage)`` of every message other stages send to stage ``h`` in ``plan``,
    in sending order: what a runtime whose stages cannot see each other must get ready to receive."""
    incoming = []
    for sender, actions in enumerate(plan):
        for action in actions:
            route = SENDS.get(action.op)
            if route is not None and sender + route[1] == h:
                incoming.append((route[0], action.frame, sender))
    return incoming


class Interpreter:
    def __init__(self, stages: Mapping[int, Stage], transport: Transport, loss_fn: LossFn | None, last: int):
        self.stages = stages  # the stages this runtime holds, by index
        self.transport = transport
        self.loss_fn = loss_fn
        self.last = last  # index of the pipeline's last stage
        self.record = StepRecord()

    def run(self, h: int, action: Action) -> None:
        stage, op, frame, t = self.stages[h], action.op, action.frame, self.transport
        if op is Op.INPUT:
            x = t.recv("input", h, frame)
            if action.chunks > 1:
                stage.inputs.update(scatter(x, frame, action.chunks))
            else:
                stage.inputs[frame] = x
        elif op is Op.RECV_ACT:
            stage.inputs[frame] = t.recv("act", h, frame)
        elif op is Op.STASH:
            stage.keep_input(frame)
        elif op is Op.FORWARD:
            stage.forward(frame, stage.inputs.pop(frame), action.grad, action.stale)
            self.record.readings.update(stage.readings())
        elif op is Op.RECOMPUTE:
            stage.forward(frame, stage.stash.pop(frame), True, action.stale)
        elif op is Op.SEND_ACT:
            t.send("act", h + SENDS[op][1], frame, stage.output(frame))
            stage.passed_on(frame)
        elif op is Op.OUTPUT:
            if action.chunks == 1:
                self.record.outputs[frame] = stage.output(frame)
            elif (whole := stage.gathered_outputs.add(frame, action.chunks, stage.output(frame))) is not None:
                self.record.outputs[whole[0]] = whole[1]
            stage.passed_on(frame)
        elif op is Op.LOSS:
            if self.loss_fn is None:
                raise ValueError("the schedule asks for a loss, but the pipeline has no loss_fn")
            if action.chunks == 1:
                target = t.recv("target", h, frame) if t.ready("target", h, frame) else None
                self.record.losses[frame] = stage.loss(frame, self.loss_fn, target)
            else:
                target = self._micro_target(h, frame, action.chunks)
                loss = stage.loss(frame, self.loss_fn, target, scale=1.0 / action.chunks)
                if (whole := stage.gathered_losses.add(frame, action.chunks, loss)) is not None:
                    self.record.losses[whole[0]] = whole[1]
        elif op is Op.RECV_GRAD:
            assert action.grad_frame is not None
            stage.received_grads[action.grad_frame] = t.recv("grad", h, action.grad_frame)
        elif op is Op.BACKWARD:
            assert action.grad_frame is not None
            grad = None if h == self.last else stage.received_grads.pop(action.grad_frame)
            stage.backward(frame, action.grad_frame, grad)
        elif op is Op.SEND_GRAD:
            t.send("grad", h + SENDS[op][1], frame, stage.input_grads.pop(frame))
        elif op is Op.UPDATE:
            stage.update(keep_previous=action.stale)
        else:  # pragma: no cover - exhaustive over Op
            raise AssertionError(op)

    def _micro_target(self, h: int, micro: int, chunks: int) -> Tensor | None:
        """The target of a micro-batch: the batch's target (if any) is split on first use."""
        stage, frame = self.stages[h], micro // chunks
        if micro not in stage.targets and self.transport.ready("target", h, frame):
            stage.targets.update(scatter(self.transport.recv("target", h, frame), frame, chunks))
        return stage.targets.pop(micro, None)

    def is_ready(self, h: int, action: Action) -> bool:
        """Whether ``action`` can run now without waiting for another stage."""
        if action.op is Op.RECV_ACT:
            return self.transport.ready("act", h, action.frame)
        if action.op is Op.RECV_GRAD:
            assert action.grad_frame is not None
            return self.transport.ready("grad", h, action.grad_frame)
        return True
