"""Pipelined backpropagation with stale weights (a stash of inputs, no weight copies),
and its hybrid with exact training (pipelined-stale-weights paper, Sections 3-4)."""

from __future__ import annotations

from .base import Action, Op, Schedule, StepActions, exists
from .sequential import Sequential, exact_step


class Stash(Schedule):
    """Like PARTIME, stage h forwards frame t-h at step t; unlike it, the backward uses the right
    data. Each stage keeps a FIFO of the inputs it received; at step t it backpropagates the
    gradient that stage h+1 sent at step t-1 for frame b = t-h-2(D-1-h) through a recompute of
    *that frame's* stashed input with its current weights, then updates: right data, stale weights
    (2(D-1-h) steps old), no weight copies. The FIFO of stage h holds 2(D-1-h)+1 inputs: memory
    grows with the distance to the end of the pipeline.
    """

    name = "stash"
    intra_step_messages = False

    def gradient_delay(self, h: int) -> int:
        """Steps between stage h's forward of a frame and its backward of that frame."""
        return 2 * (self.last - h)

    def actions(self, step: int, last_frame: int | None, learn: bool) -> StepActions:
        plan: StepActions = []
        for h in range(self.stages):
            frame, back = step - h, step - h - self.gradient_delay(h)
            if h == self.last:  # forward and backward of the same frame: exact, nothing stashed
                plan.append(exact_step(h, h, frame, learn) if exists(frame, last_frame) else [])
                continue
            acts: list[Action] = []
            if exists(frame, last_frame):
                acts.append(Action(Op.INPUT, frame) if h == 0 else Action(Op.RECV_ACT, frame))
                if learn:
                    acts.append(Action(Op.STASH, frame))
                acts += [Action(Op.FORWARD, frame), Action(Op.SEND_ACT, frame)]
            if learn and exists(back, last_frame):
                acts += [
                    Action(Op.RECV_GRAD, back, back),
                    Action(Op.RECOMPUTE, back),
                    Action(Op.BACKWARD, back, back),
                ]
                if h > 0:
                    acts.append(Action(Op.SEND_GRAD, back))
                acts.append(Action(Op.UPDATE, back))
            plan.append(acts)
        return plan

    def output_frame(self, step: int) -> int:
        return step - self.last

    def drain_steps(self) -> int:
        return self.gradient_delay(0)  # stage 0 learns from the last frame 2(D-1) steps after it entered


class Hybrid(Stash):
    """``Stash`` for the first ``hybrid_after`` steps, then drain and continue with exact
    ``sequential`` training (Section 4 of the paper: pipelined speed early, exact updates late).

    While the stash pipeline drains (2(D-1) steps) the frames that keep arriving queue up; the
    sequential phase then runs 2(D-1) frames behind the input. Steps count from the pipeline's
    (re)start: after a flush or a weight load it pipelines again for ``hybrid_after`` steps.
    """

    name = "hybrid"
    intra_step_messages = True

    def __init__(self, stages: int, hybrid_after: int) -> None:
        super().__init__(stages)
        if hybrid_after < 0:
            raise ValueError(f"hybrid_after must be >= 0, got {hybrid_after}")
        self.hybrid_after = hybrid_after
        self.lag = self.gradient_delay(0)
        self.exact = Sequential(stages)

    def sequential_from(self) -> int:
        """The first step of the exact phase."""
        return self.hybrid_after + self.lag

    def actions(self, step: int, last_frame: int | None, learn: bool) -> StepActions:
        if step < self.sequential_from():
            pipelined = self.hybrid_after - 1 if last_frame is None else min(last_frame, self.hybrid_after - 1)
            return super().actions(step, pipelined, learn)
        return self.exact.actions(step - self.lag, last_frame, learn)

    def output_frame(self, step: int) -> int:
        return super().output_frame(step) if step < self.sequential_from() else step - self.lag

    def message_slots(self) -> int:
        return self.lag + 2  # inputs queue up while the stash phase drains
