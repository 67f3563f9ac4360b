"""One stream as the API process serves it: its settings, its viewers, and its work, which runs in this process or
in a Ray actor (``server.stream.work.StreamRunner``; ``server.placement`` chooses).

Frames and notices the work produces come in on the work's threads (or the Ray proxy's) and go to the viewers on
the event loop (``Broadcaster``)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from .. import errors
from ..stream.checkpoint_acks import CheckpointFailed
from ..stream.config import StreamConfig
from ..stream.pictures import FramePictures, kinds_mask
from ..stream.work import StreamRunner, StreamSnapshot
from .broadcast import Broadcaster
from .metrics import ServerMetrics

__all__ = ["CheckpointFailed", "StreamSession"]


class StreamSession:
    def __init__(self, sid: str, cfg: StreamConfig, metrics: ServerMetrics, loop: asyncio.AbstractEventLoop) -> None:
        self.id, self.cfg, self.metrics, self.loop = sid, cfg, metrics, loop
        self.broadcaster = Broadcaster(on_drop=metrics.ws_dropped.labels(sid).inc, on_count=self._set_viewers)
        self.viewers = 0
        self._refused = False
        self.runner: StreamRunner | None = None  # set once the placement started (or found) the work

    @property
    def work(self) -> StreamRunner:
        assert self.runner is not None, "the stream's work is not placed yet"
        return self.runner

    def snapshot(self) -> StreamSnapshot:
        return self.work.snapshot()

    @property
    def active(self) -> bool:
        return self.runner is None or self.snapshot().active

    def show_frame(self, frame: tuple[dict, FramePictures]) -> None:
        self._post(self.broadcaster.frame, frame)

    def announce(self, notice: dict) -> None:
        error = notice.get("error") or {}
        if error.get("code") in errors.REFUSED_HOP and not self._refused:  # a later hop: a redirect, a playlist entry
            self._refused = True  # the error is final: one refusal, however often it is told
            self.metrics.sources_refused.labels(error["code"]).inc()
        self._post(self.broadcaster.notice, notice)

    def _set_viewers(self, n: int, kinds: set[str]) -> None:
        self.viewers = n
        self.metrics.viewers(self.id, n)
        if self.runner is not None:
            self.runner.set_wanted(kinds_mask(kinds))  # the learner renders the pictures someone watches, no more

    def _post(self, fn: Callable[[Any], None], arg: Any) -> None:
        """Hand ``arg`` to the event loop (a no-op once the server's loop has closed)."""
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(fn, arg)
