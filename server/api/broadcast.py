"""Fan-out of one stream's frames to its WebSocket viewers, on the event loop.

Each viewer has a buffer of ONE frame: a newer frame replaces an unsent one (counted as a viewer drop), so a
slow viewer sees only the newest frame and never slows the worker or other viewers. State and error messages
are never dropped (they are few).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any


class Viewer:
    def __init__(self, on_drop: Callable[[], None], kinds: list[str]) -> None:
        self.kinds = kinds  # the pictures this viewer wants with each frame
        self._frame: Any = None
        self._notices: deque[dict] = deque(maxlen=64)
        self._wake = asyncio.Event()
        self._on_drop = on_drop

    def offer_frame(self, frame: Any) -> None:
        if self._frame is not None:
            self._on_drop()
        self._frame = frame
        self._wake.set()

    def offer_notice(self, notice: dict) -> None:
        self._notices.append(notice)
        self._wake.set()

    async def next(self) -> tuple[str, Any]:
        """("notice", dict) before ("frame", frame): the newest frame, waiting for one if needed."""
        while True:
            if self._notices:
                return "notice", self._notices.popleft()
            if self._frame is not None:
                frame, self._frame = self._frame, None
                return "frame", frame
            self._wake.clear()
            await self._wake.wait()


class Broadcaster:
    """Lives on the event loop; the session's supervisor thread reaches it through ``call_soon_threadsafe``."""

    def __init__(self, on_drop: Callable[[], None], on_count: Callable[[int, set[str]], None]) -> None:
        self.viewers: set[Viewer] = set()
        self._on_drop = on_drop
        self._on_count = on_count

    def join(self, kinds: list[str]) -> Viewer:
        viewer = Viewer(self._on_drop, kinds)
        self.viewers.add(viewer)
        self._counted()
        return viewer

    def leave(self, viewer: Viewer) -> None:
        self.viewers.discard(viewer)
        self._counted()

    def _counted(self) -> None:
        """Tell the stream how many viewers there are and which pictures they want between them."""
        self._on_count(len(self.viewers), {kind for viewer in self.viewers for kind in viewer.kinds})

    def frame(self, frame: Any) -> None:
        for viewer in self.viewers:
            viewer.offer_frame(frame)

    def notice(self, notice: dict) -> None:
        for viewer in self.viewers:
            viewer.offer_notice(notice)
