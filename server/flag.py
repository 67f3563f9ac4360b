"""A cross-process flag that no process can wedge by dying.

``multiprocessing.Event`` can: a process SIGKILLed inside ``Event.wait()`` leaves the condition's sleeper count
behind, and every later ``set()`` blocks forever waiting for it to wake — one killed decoder froze its stream's
supervisor. A flag in shared memory, polled, has no lock and no sleeper bookkeeping to leave behind.
"""

from __future__ import annotations

import ctypes
import time
from typing import Any

POLL_S = 0.01


class Flag:
    """``set()``, ``is_set()`` and ``wait(timeout)`` like ``multiprocessing.Event``; picklable to spawned children."""

    def __init__(self, ctx: Any) -> None:
        self._value = ctx.RawValue(ctypes.c_bool, False)

    def set(self) -> None:
        self._value.value = True

    def is_set(self) -> bool:
        return self._value.value

    def wait(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not self._value.value:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(POLL_S, left))
        return True
