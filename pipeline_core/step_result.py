"""``StepResult``: what leaves the pipeline at one step, read from the device only when asked.

Why lazy: on a GPU a step is queued work. Reading its loss or its duration on the host waits for the device to
finish it, and a host that waits after every step leaves the GPU idle while it prepares the next one. A result
therefore holds the loss as a device tensor and the step's timing as CUDA events; ``loss``, ``step_seconds`` and
``stage_seconds`` wait for them when first read. A caller that reads them after queueing more work, or copies
``output`` and ``loss_tensor`` to the host without blocking (the service's learner), never stalls a step. On CPU the
work is done when ``Pipeline.step`` returns and reading costs nothing.
"""

from __future__ import annotations

import time
from functools import cached_property

import torch
from torch import Tensor

#: A CUDA stage's compute span: events recorded on its stream before its first and after its last action.
StageEvents = tuple[torch.cuda.Event, torch.cuda.Event]


class StepClock:
    """How long one step took: the host's clock on CPU; on CUDA, events on the device's current stream, so that the
    span is the device's (the host only queued the work)."""

    def __init__(self, device: torch.device) -> None:
        self._host_start = time.perf_counter()
        self._host_seconds = 0.0
        self._events: tuple[torch.cuda.Event, torch.cuda.Event] | None = None
        if device.type == "cuda":
            start = torch.cuda.Event(enable_timing=True)
            start.record(torch.cuda.current_stream(device))
            self._events = (start, torch.cuda.Event(enable_timing=True))
        self._device = device

    def stop(self) -> None:
        self._host_seconds = time.perf_counter() - self._host_start
        if self._events is not None:
            self._events[1].record(torch.cuda.current_stream(self._device))

    @cached_property
    def seconds(self) -> float:
        if self._events is None:
            return self._host_seconds
        start, end = self._events
        end.synchronize()
        return start.elapsed_time(end) / 1000.0


class StepResult:
    """What came out of the pipeline at one step.

    ``frame`` is the true index of the frame whose ``output`` and loss these are (PARTIME delays outputs by D-1
    steps); it, ``output`` and ``loss_tensor`` are None while the pipeline fills. ``output`` and ``loss_tensor``
    (0-d, detached) live on the last stage's device and belong to the caller (the next step does not overwrite
    them). ``stage_seconds``: each stage's busy time (a stage process's leaves out its waits for its neighbours'
    messages; None where unknown: a replayed CUDA graph has no per-stage timing). ``readings``: what the stages' layers
    read of the samples they last forwarded (``Stage.readings``), by name, on their devices; a stage process before
    the last may be a step behind, and its readings come with the step it answers in."""

    def __init__(
        self,
        output: Tensor | None,
        loss_tensor: Tensor | None,
        frame: int | None,
        clock: StepClock | None = None,
        stage_seconds: list[float | None] | None = None,
        stage_events: list[StageEvents] | None = None,
        readings: dict[str, Tensor] | None = None,
    ) -> None:
        self.output = output
        self.readings = readings or {}
        self.loss_tensor = loss_tensor
        self.frame = frame
        self._clock = clock
        self._stage_seconds = stage_seconds or []
        self._stage_events = stage_events

    @cached_property
    def loss(self) -> float | None:
        """The loss as a number (on CUDA this waits for the step)."""
        return None if self.loss_tensor is None else float(self.loss_tensor)

    @property
    def step_seconds(self) -> float:
        """The whole step's duration (on CUDA this waits for the step): what the host waited for it, or its slowest
        stage's busy time where that is longer. A step lasts as long as its slowest stage, and a stage process may
        work outside the host's wait: it finishes its step after the host has the results, or begins it before the
        host sent its frame (``Pipeline``'s ``start_early``)."""
        waited = 0.0 if self._clock is None else self._clock.seconds
        return max([waited, *(s for s in self.stage_seconds if s is not None)])

    @cached_property
    def stage_seconds(self) -> list[float | None]:
        if self._stage_events is None:
            return list(self._stage_seconds)
        seconds: list[float | None] = []
        for start, end in self._stage_events:
            end.synchronize()
            seconds.append(start.elapsed_time(end) / 1000.0)
        return seconds
