"""Exact backpropagation over all stages within every step: the baseline, at any depth."""

from __future__ import annotations

from .base import Action, Op, Schedule, StepActions, forward_part


def exact_step(h: int, last: int, frame: int, learn: bool) -> list[Action]:
    """Stage h's share of one exact forward-backward-update of ``frame``."""
    if not learn:
        return forward_part(h, last, frame)
    backward = [Action(Op.LOSS, frame)] if h == last else [Action(Op.RECV_GRAD, frame, frame)]
    backward.append(Action(Op.BACKWARD, frame, frame))
    if h > 0:
        backward.append(Action(Op.SEND_GRAD, frame))
    backward.append(Action(Op.UPDATE, frame))
    return forward_part(h, last, frame, grad=True) + backward


class Sequential(Schedule):
    name = "sequential"

    def actions(self, step: int, last_frame: int | None, learn: bool) -> StepActions:
        if last_frame is not None and step > last_frame:
            return [[] for _ in range(self.stages)]
        return [exact_step(h, self.last, step, learn) for h in range(self.stages)]

    def output_frame(self, step: int) -> int:
        return step

    def steady_key(self, step: int) -> int | None:
        return step % 2
