"""Schedules are data: per step, the ordered list of actions of every stage.

A schedule knows nothing about tensors, devices or threads. It only says, for step ``t``, what each
stage does and on which frame; one runtime executes any schedule. This mirrors
``torch.distributed.pipelining``'s action lists, so new schedules (stash, GPipe, CDP) are new
generators of actions, not new runtimes.

Frames are numbered from 0 within an *epoch* (the pipeline restarts numbering after a flush).
Messages between stages are identified by ``(kind, frame)``: the frame whose forward graph produced
them, which is what the receiving stage asks for.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum


class Op(Enum):
    INPUT = "input"  # stage 0 takes the pipeline input of `frame`
    RECV_ACT = "recv_act"  # take the activation of `frame` sent by the previous stage
    FORWARD = "forward"  # forward `frame`; keep the autograd graph when `grad` is True
    SEND_ACT = "send_act"  # send the output of `frame` to the next stage
    OUTPUT = "output"  # last stage: publish the output of `frame` as the pipeline's result
    LOSS = "loss"  # last stage: loss of `frame` against its target; seeds the backward
    RECV_GRAD = "recv_grad"  # take the gradient labelled `grad_frame` sent by the next stage
    BACKWARD = "backward"  # backprop the gradient labelled `grad_frame` through the graph of `frame`
    SEND_GRAD = "send_grad"  # send the gradient w.r.t. the input of `frame`'s graph to the previous stage
    UPDATE = "update"  # optimizer step


@dataclass(frozen=True)
class Action:
    op: Op
    frame: int
    grad_frame: int | None = None  # BACKWARD / RECV_GRAD: the label of the gradient used
    grad: bool = False  # FORWARD: keep the graph for a backward later in this step

    def __str__(self) -> str:
        extra = f"<-{self.grad_frame}" if self.grad_frame is not None else ""
        return f"{self.op.value}({self.frame}{extra})"


StepActions = list[list[Action]]  # one list per stage, in execution order


class Schedule:
    """Base class: subclasses implement :meth:`actions`."""

    name: str = ""
    #: True when a stage may receive, within a step, what another stage sent in the same step.
    #: Runtimes that cannot express intra-step dependencies (per-device CUDA graphs) need False.
    intra_step_messages: bool = True

    def __init__(self, stages: int) -> None:
        if stages < 1:
            raise ValueError(f"a schedule needs at least one stage, got {stages}")
        self.stages = stages

    def actions(self, step: int, last_frame: int | None, learn: bool) -> StepActions:
        """Actions of every stage at ``step``.

        ``last_frame`` is the last frame that exists (None while frames keep arriving: the
        pipeline is being fed); ``learn`` is False for inference-only pipelines (no loss).
        """
        raise NotImplementedError

    def output_frame(self, step: int) -> int:
        """The frame whose output the pipeline returns at ``step`` (may be negative: none yet)."""
        raise NotImplementedError

    def drain_steps(self) -> int:
        """Steps needed after the last frame to get every output out."""
        return 0

    def steady_key(self, step: int) -> int | None:
        """A key shared by all steps with identical actions up to frame renumbering, once the
        pipeline is full; None while filling. Runtimes cache one CUDA graph per key."""
        return None


def _forward_part(h: int, last: int, frame: int) -> list[Action]:
    """Receive (or take the input), forward, and pass the output on."""
    first = Action(Op.INPUT, frame) if h == 0 else Action(Op.RECV_ACT, frame)
    fwd = Action(Op.FORWARD, frame)
    send = Action(Op.OUTPUT, frame) if h == last else Action(Op.SEND_ACT, frame)
    return [first, fwd, send]


def _with_grad(forward: list[Action]) -> list[Action]:
    return [Action(a.op, a.frame, grad=True) if a.op is Op.FORWARD else a for a in forward]


class Partime(Schedule):
    """PARTIME (Algorithm 1): every stage forwards, backwards and updates at every step.

    At step t stage h works on frame t-h. The last stage backpropagates the loss of its frame;
    stage h < D-1 backpropagates the gradient that stage h+1 sent at step t-1 (computed on frame
    t-h-2) through its *current* graph (frame t-h): no stashing. A stage that has no input does
    nothing; one that has no real gradient yet only forwards.
    """

    name = "partime"
    intra_step_messages = False

    def first_backward_step(self, h: int) -> int:
        """Stage D-1 learns from step D-1; each earlier stage one step after the next one."""
        last = self.stages - 1
        return last + (last - h)

    def actions(self, step: int, last_frame: int | None, learn: bool) -> StepActions:
        last = self.stages - 1
        plan: StepActions = []
        for h in range(self.stages):
            frame = step - h
            if frame < 0 or (last_frame is not None and frame > last_frame):
                plan.append([])
                continue
            forward = _forward_part(h, last, frame)
            if not learn or step < self.first_backward_step(h):
                plan.append(forward)
                continue
            grad_frame = frame if h == last else frame - 2
            backward = [Action(Op.LOSS, frame)] if h == last else [Action(Op.RECV_GRAD, frame, grad_frame)]
            backward.append(Action(Op.BACKWARD, frame, grad_frame))
            if h > 0:
                backward.append(Action(Op.SEND_GRAD, frame))
            backward.append(Action(Op.UPDATE, frame))
            plan.append(_with_grad(forward) + backward)
        return plan

    def output_frame(self, step: int) -> int:
        return step - (self.stages - 1)

    def drain_steps(self) -> int:
        return self.stages - 1

    def steady_key(self, step: int) -> int | None:
        # Steps differ only in frame numbers; messages alternate between two slots (frame parity).
        return step % 2 if step >= self.first_backward_step(0) else None


class Sequential(Schedule):
    """Exact backpropagation over all stages within every step (the baseline, any D)."""

    name = "sequential"

    def actions(self, step: int, last_frame: int | None, learn: bool) -> StepActions:
        last = self.stages - 1
        if last_frame is not None and step > last_frame:
            return [[] for _ in range(self.stages)]
        plan: StepActions = []
        for h in range(self.stages):
            forward = _forward_part(h, last, step)
            if not learn:
                plan.append(forward)
                continue
            backward = [Action(Op.LOSS, step)] if h == last else [Action(Op.RECV_GRAD, step, step)]
            backward.append(Action(Op.BACKWARD, step, step))
            if h > 0:
                backward.append(Action(Op.SEND_GRAD, step))
            backward.append(Action(Op.UPDATE, step))
            plan.append(_with_grad(forward) + backward)
        return plan

    def output_frame(self, step: int) -> int:
        return step

    def steady_key(self, step: int) -> int | None:
        return step % 2


SCHEDULES: dict[str, Callable[[int], Schedule]] = {
    Partime.name: Partime,
    Sequential.name: Sequential,
}


def make_schedule(schedule: str | Schedule, stages: int) -> Schedule:
    """A schedule by name (or an instance, for schedules with options)."""
    if isinstance(schedule, Schedule):
        if schedule.stages != stages:
            raise ValueError(f"schedule built for {schedule.stages} stages, pipeline has {stages}")
        return schedule
    try:
        return SCHEDULES[schedule](stages)
    except KeyError:
        raise ValueError(f"unknown schedule {schedule!r}; choose one of {sorted(SCHEDULES)}") from None
