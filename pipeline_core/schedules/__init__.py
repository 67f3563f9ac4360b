"""Schedules are data: per step, the ordered list of actions of every stage (see ``base``).

One file per schedule; ``make_schedule`` builds one by name (defaults) or passes an instance
through (schedules with options: ``Hybrid(stages, hybrid_after=n)``, ``GPipe(stages, chunks=4)``).
"""

from __future__ import annotations

from collections.abc import Callable

from .base import Action, Op, Schedule, StepActions, micro_id
from .cdp import CDPv1, CDPv2, CyclicDataParallel
from .gpipe import GPipe
from .partime import Partime
from .sequential import Sequential
from .stash import Hybrid, Stash

SCHEDULES: dict[str, Callable[[int], Schedule]] = {
    cls.name: cls for cls in (Partime, Sequential, Stash, GPipe, CDPv1, CDPv2)
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


__all__ = [
    "Action",
    "CDPv1",
    "CDPv2",
    "CyclicDataParallel",
    "GPipe",
    "Hybrid",
    "Op",
    "Partime",
    "SCHEDULES",
    "Schedule",
    "Sequential",
    "Stash",
    "StepActions",
    "make_schedule",
    "micro_id",
]
