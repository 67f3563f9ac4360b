"""Step numbering within an epoch, shared by ``Pipeline`` and ``launch``: which frame is fed, what
every stage does at each step, and which frame comes out. An epoch restarts after a flush."""

from __future__ import annotations

from dataclasses import dataclass

from .schedules import Schedule, StepActions


@dataclass(frozen=True)
class Step:
    index: int
    plan: StepActions
    output_frame: int  # the frame whose output (and loss) leaves the pipeline at this step
    key: int | None  # the steady-state key of a fed step (CUDA graphs), None while draining


class Epoch:
    def __init__(self, schedule: Schedule, learn: bool) -> None:
        self.schedule = schedule
        self.learn = learn
        self.step = 0
        self.fed = 0

    def feed(self) -> int:
        """The index of the next frame fed."""
        self.fed += 1
        return self.fed - 1

    def drain_frame(self) -> int:
        """The last frame that exists, once no more come: what a draining step is told."""
        return self.fed - 1

    def next_step(self, last_frame: int | None) -> Step:
        """The next step: fed (``last_frame`` None) or draining."""
        t, schedule = self.step, self.schedule
        self.step += 1
        key = schedule.steady_key(t) if last_frame is None else None
        return Step(t, schedule.actions(t, last_frame, learn=self.learn), schedule.output_frame(t), key)
