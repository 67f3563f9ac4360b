"""What the engine's parts promise each other: ``Transport`` (for the interpreter) and ``Runtime``
(for ``Pipeline``). Spelt out so a new runtime knows exactly what to implement, and so that a
runtime-specific call cannot creep into ``Pipeline`` unnoticed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from torch import Tensor, nn

from .schedules import StepActions
from .step_result import StageEvents


@dataclass
class StepRecord:
    """What one step produced, keyed by frame, plus how long each stage took."""

    outputs: dict[int, Tensor] = field(default_factory=dict)
    losses: dict[int, Tensor] = field(default_factory=dict)
    stage_seconds: list[float | None] = field(default_factory=list)
    #: Where stages run asynchronously on CUDA streams, the events that time them (the host's clock cannot).
    stage_events: list[StageEvents] | None = None
    #: What the stages' layers read of the samples they last forwarded (``Stage.readings``), by name.
    readings: dict[str, Tensor] = field(default_factory=dict)


class Transport(Protocol):
    """Moves tensors between stages during a step, addressed by (kind, receiving stage, frame)."""

    def send(self, kind: str, stage: int, frame: int, tensor: Tensor) -> None: ...

    def recv(self, kind: str, stage: int, frame: int) -> Tensor: ...

    def ready(self, kind: str, stage: int, frame: int) -> bool: ...


class Runtime(Protocol):
    """Executes a schedule's steps on the stages it was given (``LocalRuntime``, ``ProcessRuntime``)."""

    #: Every stage is on a CUDA device: ``Pipeline`` times steps with events and may capture CUDA graphs.
    cuda: bool
    #: ``run_step`` takes the following step's plan and sends the stages after the first their part of it early
    #: (``ProcessRuntime``; the schedule's ``later_stages_ahead``).
    starts_early: bool

    def feed(self, kind: str, stage: int, frame: int, tensor: Tensor) -> None:
        """Hand ``stage`` a tensor from the host between steps (``input`` frames, ``target`` s);
        it is copied before this returns, so the caller may reuse its buffer."""
        ...

    def run_step(self, step: int, plan: StepActions, following: StepActions | None = None) -> StepRecord:
        """Run every stage's actions of one step; raise ``PipelineError`` rather than hang. ``following``: only
        where ``starts_early``."""
        ...

    def new_epoch(self) -> None:
        """Forget every message and frame in flight (after a flush or a weight load)."""
        ...

    def state_dicts(self) -> list[dict]: ...

    def load_state_dicts(self, states: list[dict]) -> None: ...

    def set_lr(self, lrs: list[float]) -> None: ...

    def set_group_options(self, holding: str, options: dict[str, float]) -> None: ...

    def modules(self) -> list[nn.Module]:
        """Each stage's module with its current weights."""
        ...

    def close(self) -> None:
        """Release threads or processes (idempotent)."""
        ...
