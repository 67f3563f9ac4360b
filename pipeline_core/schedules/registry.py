"""The built-in schedules by name, and ``make_schedule``: one place that turns a name into a schedule."""

from __future__ import annotations

from collections.abc import Callable

from .base import Schedule
from .cdp import CDPv1, CDPv2
from .gpipe import GPipe
from .partime import Partime
from .sequential import Sequential
from .stash import Stash

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
