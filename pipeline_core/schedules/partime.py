"""PARTIME (Algorithm 1 of the paper): every stage forwards, backwards and updates at every step."""

from __future__ import annotations

from .base import Action, Op, Schedule, StepActions, exists, forward_part


class Partime(Schedule):
    """At step t stage h works on frame t-h. The last stage backpropagates the loss of its frame;
    stage h < D-1 backpropagates the gradient that stage h+1 sent at step t-1 (computed on frame
    t-h-2) through its *current* graph (frame t-h): no stashing. A stage that has no input does
    nothing; one that has no real gradient yet only forwards.
    """

    name = "partime"
    intra_step_messages = False
    later_stages_ahead = True  # stage h > 0 works on frame t-h, which exists once frame t-1 was fed

    def first_backward_step(self, h: int) -> int:
        """Stage D-1 learns from step D-1; each earlier stage one step after the next one."""
        return self.last + (self.last - h)

    def actions(self, step: int, last_frame: int | None, learn: bool) -> StepActions:
        last = self.last
        plan: StepActions = []
        for h in range(self.stages):
            frame = step - h
            if not exists(frame, last_frame):
                plan.append([])
                continue
            if not learn or step < self.first_backward_step(h):
                plan.append(forward_part(h, last, frame))
                continue
            grad_frame = frame if h == last else frame - 2
            backward = [Action(Op.LOSS, frame)] if h == last else [Action(Op.RECV_GRAD, frame, grad_frame)]
            backward.append(Action(Op.BACKWARD, frame, grad_frame))
            if h > 0:
                backward.append(Action(Op.SEND_GRAD, frame))
            backward.append(Action(Op.UPDATE, frame))
            plan.append(forward_part(h, last, frame, grad=True) + backward)
        return plan

    def gradient_delay(self, h: int) -> int:
        """Stage h pushes through frame f's graph the gradient of the loss of frame f - 2(D-1-h)."""
        return 2 * (self.last - h)

    def output_frame(self, step: int) -> int:
        return step - self.last

    def drain_steps(self) -> int:
        return self.last

    def steady_key(self, step: int) -> int | None:
        # Steps differ only in frame numbers; messages alternate between two slots (frame parity).
        return step % 2 if step >= self.first_backward_step(0) else None
