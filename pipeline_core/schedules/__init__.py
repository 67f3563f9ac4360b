"""Schedules are data: per step, the ordered list of actions of every stage (see ``base``).

One file per schedule; ``layout`` prints and checks one without running it; ``make_schedule``
builds one by name (defaults) or passes an instance through (schedules with options:
``Hybrid(stages, hybrid_after=n)``, ``GPipe(stages, chunks=4)``).
"""

from __future__ import annotations

from .base import SENDS, Action, Op, Schedule, StepActions, micro_id
from .cdp import CDPv1, CDPv2, CyclicDataParallel
from .gpipe import GPipe
from .layout import Layout, lay_out, validate
from .partime import Partime
from .registry import SCHEDULES, make_schedule
from .sequential import Sequential
from .stash import Hybrid, Stash

__all__ = [
    "Action",
    "CDPv1",
    "CDPv2",
    "CyclicDataParallel",
    "GPipe",
    "Hybrid",
    "Layout",
    "Op",
    "Partime",
    "SCHEDULES",
    "SENDS",
    "Schedule",
    "Sequential",
    "Stash",
    "StepActions",
    "lay_out",
    "make_schedule",
    "micro_id",
    "validate",
]
