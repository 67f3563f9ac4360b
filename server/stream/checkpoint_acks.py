"""Checkpoints on request (``POST /api/streams/{id}/checkpoint``): the API thread asks the learner process and waits
for the answer carrying its request's id, which the stream's supervisor thread delivers."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable

from .protocol import CheckpointRequest, CheckpointWritten


class CheckpointFailed(Exception):
    """The learner could not write a checkpoint (the message says why); it keeps learning."""


class CheckpointAcks:
    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self._waiting: dict[int, tuple[threading.Event, list[int | None | CheckpointFailed]]] = {}

    def request(self, send: Callable[[CheckpointRequest], None], timeout_s: float) -> int | None:
        """Send a request and wait for its answer: the frame count saved, or None (no answer in time).
        ``CheckpointFailed`` when the learner could not write it."""
        rid = next(self._ids)
        done, result = threading.Event(), []
        self._waiting[rid] = (done, result)
        send(CheckpointRequest(rid))
        ok = done.wait(timeout_s)
        self._waiting.pop(rid, None)
        if ok and result and isinstance(result[0], CheckpointFailed):
            raise result[0]
        return result[0] if ok and result else None

    def answer(self, m: CheckpointWritten) -> None:
        """Wake whoever waits for ``m`` (periodic and final checkpoints answer nobody)."""
        waiting = self._waiting.get(m.request) if m.request is not None else None
        if waiting is not None:
            done, result = waiting
            result.append(CheckpointFailed(m.error) if m.error else m.frames if m.frames >= 0 else None)
            done.set()
