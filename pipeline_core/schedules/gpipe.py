"""GPipe (torchgpipe): synchronous micro-batch pipelining with optional activation checkpointing."""

from __future__ import annotations

from .base import Action, Op, Schedule, StepActions, exists, micro_batch_check, micro_id

CHECKPOINTS = ("never", "except_last", "always")


class GPipe(Schedule):
    """Each frame is a batch (e.g. a replay window of the last B frames, PARTIME Section V.D),
    split into ``chunks`` micro-batches. Within one step every stage forwards all micro-batches
    (fill), then backpropagates them in reverse order (drain), accumulating gradients, and updates
    once: the gradients are those of the whole batch without pipelining (for losses that average
    over the batch).

    ``checkpoint`` (torchgpipe's modes): checkpointed micro-batches keep only their stage input
    during the forward and recompute the activations in the backward; ``except_last`` spares the
    last micro-batch, whose backward comes right after its forward. Recomputation assumes layers
    that compute the same thing twice (no dropout, no batch-norm statistics).
    """

    name = "gpipe"

    def __init__(self, stages: int, chunks: int | None = None, checkpoint: str = "except_last") -> None:
        super().__init__(stages)
        self.chunks = stages if chunks is None else chunks
        if self.chunks < 1:
            raise ValueError(f"chunks must be >= 1, got {self.chunks}")
        if checkpoint not in CHECKPOINTS:
            raise ValueError(f"checkpoint must be one of {CHECKPOINTS}, got {checkpoint!r}")
        self.checkpoint = checkpoint

    def checkpointed(self, m: int) -> bool:
        return self.checkpoint == "always" or (self.checkpoint == "except_last" and m < self.chunks - 1)

    def actions(self, step: int, last_frame: int | None, learn: bool) -> StepActions:
        if not exists(step, last_frame):
            return [[] for _ in range(self.stages)]
        return [self._stage(h, step, learn) for h in range(self.stages)]

    def _stage(self, h: int, frame: int, learn: bool) -> list[Action]:
        c, last = self.chunks, self.last
        acts = [Action(Op.INPUT, frame, chunks=c)] if h == 0 else []
        for m in range(c):  # fill: forward every micro-batch
            u, ckpt = micro_id(frame, m, c), learn and self.checkpointed(m)
            if h > 0:
                acts.append(Action(Op.RECV_ACT, u))
            acts += [Action(Op.STASH, u), Action(Op.FORWARD, u)] if ckpt else [Action(Op.FORWARD, u, grad=learn)]
            if h < last:
                acts.append(Action(Op.SEND_ACT, u))
                continue
            acts.append(Action(Op.OUTPUT, u, chunks=c))
            if learn and not ckpt:
                acts.append(Action(Op.LOSS, u, chunks=c))
        if not learn:
            return acts
        for m in reversed(range(c)):  # drain: backward in reverse order, gradients accumulate
            u, ckpt = micro_id(frame, m, c), self.checkpointed(m)
            if h < last:
                acts.append(Action(Op.RECV_GRAD, u, u))
            if ckpt:
                acts.append(Action(Op.RECOMPUTE, u))
                if h == last:
                    acts.append(Action(Op.LOSS, u, chunks=c))
            acts.append(Action(Op.BACKWARD, u, u))
            if h > 0:
                acts.append(Action(Op.SEND_GRAD, u))
        acts.append(Action(Op.UPDATE, frame))
        return acts

    def output_frame(self, step: int) -> int:
        return step

    def message_slots(self) -> int:
        return max(2, self.chunks)  # all micro-batches of a step are in flight at once

    def check_input(self, sample_input_shape: tuple[int, ...]) -> None:
        micro_batch_check(sample_input_shape, self.chunks, self.name)
