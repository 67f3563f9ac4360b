"""The vocabulary of schedules: operations, actions, and the ``Schedule`` base class.

A schedule knows nothing about tensors, devices or threads. It only says, for step ``t``, what each
stage does and on which frame; one runtime executes any schedule. This mirrors
``torch.distributed.pipelining``'s action lists, so each schedule is a generator of actions, not a
runtime.

Frames are numbered from 0 within an *epoch* (the pipeline restarts numbering after a flush).
Messages between stages are identified by ``(kind, frame)``: the frame whose forward graph produced
them, which is what the receiving stage asks for. Schedules that split a frame (a batch) into
micro-batches address each micro-batch by its own id (:func:`micro_id`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Op(Enum):
    INPUT = "input"  # stage 0 takes the pipeline input of `frame` (split into `chunks` micro-batches)
    RECV_ACT = "recv_act"  # take the activation of `frame` sent by the previous stage
    STASH = "stash"  # keep a copy of the input of `frame` for a RECOMPUTE later
    FORWARD = "forward"  # forward `frame`; keep the autograd graph when `grad` is True
    RECOMPUTE = "recompute"  # forward the stashed input of `frame` again, keeping the graph
    SEND_ACT = "send_act"  # send the output of `frame` to the next stage
    OUTPUT = "output"  # last stage: publish the output of `frame` as the pipeline's result
    LOSS = "loss"  # last stage: loss of `frame` against its target; seeds the backward
    RECV_GRAD = "recv_grad"  # take the gradient labelled `grad_frame` sent by the next stage
    BACKWARD = "backward"  # backprop the gradient labelled `grad_frame` through the graph of `frame`
    SEND_GRAD = "send_grad"  # send the gradient w.r.t. the input of `frame`'s graph to the previous stage
    UPDATE = "update"  # optimizer step (gradients accumulated since the last one)


@dataclass(frozen=True)
class Action:
    op: Op
    frame: int
    grad_frame: int | None = None  # BACKWARD / RECV_GRAD: the label of the gradient used
    grad: bool = False  # FORWARD: keep the graph for a backward later
    #: INPUT / LOSS / OUTPUT: the frame is a batch split into this many micro-batches (``frame`` of
    #: LOSS and OUTPUT is then a micro-batch id; the pipeline's result is the whole batch's).
    chunks: int = 1
    #: FORWARD / RECOMPUTE: run on the weights from before the stage's last update (a second weight
    #: version, as PipeDream-2BW); UPDATE: keep a copy of the pre-update weights for that.
    stale: bool = False

    def __str__(self) -> str:
        extra = f"<-{self.grad_frame}" if self.grad_frame is not None else ""
        extra += f"/{self.chunks}" if self.chunks > 1 else ""
        extra += "~" if self.stale else ""
        return f"{self.op.value}({self.frame}{extra})"


StepActions = list[list[Action]]  # one list per stage, in execution order

#: The actions that send a message between stages: its kind and where it goes (stage offset).
SENDS: dict[Op, tuple[str, int]] = {Op.SEND_ACT: ("act", +1), Op.SEND_GRAD: ("grad", -1)}


def micro_id(frame: int, m: int, chunks: int) -> int:
    """The message/frame id of micro-batch ``m`` of batch ``frame``: unique across batches."""
    return frame * chunks + m


class Schedule:
    """Base class: subclasses implement :meth:`actions` and :meth:`output_frame`."""

    name: str = ""
    #: True when a stage may receive, within a step, what another stage sent in the same step.
    #: Runtimes that cannot express intra-step dependencies (per-device CUDA graphs) need False.
    intra_step_messages: bool = True
    #: True when the stages after the first do the same at a step whether or not a frame is fed at it: a runtime may
    #: then send them their next step before the host has its frame (``ProcessRuntime``'s ``start_early``).
    later_stages_ahead: bool = False

    def __init__(self, stages: int) -> None:
        if stages < 1:
            raise ValueError(f"a schedule needs at least one stage, got {stages}")
        self.stages = stages

    @property
    def last(self) -> int:
        return self.stages - 1

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
        """Steps needed after the last frame to get every output out and every update done."""
        return 0

    def steady_key(self, step: int) -> int | None:
        """A key shared by all steps with identical actions up to frame renumbering, once the
        pipeline is full; None while filling (or never, for schedules that run eagerly). Runtimes
        cache one CUDA graph per key."""
        return None

    def gradient_delay(self, h: int) -> int:
        """How many frames older the loss behind stage h's update is than the newest frame the stage
        has forwarded (0: exact backprop). Delayed gradients need smaller steps, so learning-rate
        rules scale by it."""
        return 0

    def message_slots(self) -> int:
        """How many messages of one kind a stage may have in flight: static CUDA buffers needed."""
        return 2

    def check_input(self, sample_input_shape: tuple[int, ...]) -> None:
        """Refuse, at construction, inputs this schedule cannot run on (e.g. a batch that does not
        split into micro-batches)."""


def exists(frame: int, last_frame: int | None) -> bool:
    return frame >= 0 and (last_frame is None or frame <= last_frame)


def forward_part(h: int, last: int, frame: int, grad: bool = False) -> list[Action]:
    """Receive (or take the input), forward, and pass the output on."""
    first = Action(Op.INPUT, frame) if h == 0 else Action(Op.RECV_ACT, frame)
    send = Action(Op.OUTPUT, frame) if h == last else Action(Op.SEND_ACT, frame)
    return [first, Action(Op.FORWARD, frame, grad=grad), send]


def micro_batch_check(shape: tuple[int, ...], chunks: int, name: str) -> None:
    if not shape or shape[0] % chunks:
        raise ValueError(
            f"schedule {name!r} splits each input's first (batch) dimension into {chunks} equal micro-batches; "
            f"input shape {shape} does not split"
        )
