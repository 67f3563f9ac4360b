"""Bounded waiting: every wait of the toolkit ends, in its value or in a TimeoutError that says what never came."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def until(check: Callable[[], T], timeout_s: float, what: str, poll_s: float = 0.1) -> T:
    """Poll ``check()`` until it returns something truthy; its value, or TimeoutError saying ``what``."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(poll_s)
    raise TimeoutError(f"{what}: not reached within {timeout_s:g} s (last: {last!r})")
