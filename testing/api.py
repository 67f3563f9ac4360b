"""The service's API as the tests and benchmarks call it: the product's own client, plus what only they need.

Why a subclass of ``clients.stream_api.StreamApi``: create, get, delete and the frame feed are the very calls
``overtime watch`` makes, so the tests exercise the shipped client instead of a twin of it. Added here: raw HTTP
(``http``) for tests that check status codes and headers, checkpoints, bounded waits on a stream's state, and
``/metrics`` parsed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import httpx

from clients.stream_api import StreamApi
from testing.metrics import Scrape
from testing.net import http_client
from testing.poll import until

#: What a stream's wait that timed out says of its last state: where it was, what it counted, its budget.
BRIEF = ("state", "error", "counters", "budget_note", "learning_size", "pids", "resumed_from", "checkpoint_frames")


class Served(Protocol):
    """What the client needs of the server it talks to: where it answers, where its checkpoints land, and its log
    (for errors that say what the server did). ``testing.server.ServerProcess`` is one; the client does not import
    it, the server owns its client."""

    url: str

    @property
    def checkpoint_dir(self) -> Path: ...

    def log_tail(self, chars: int = ...) -> str: ...


class Api(StreamApi):
    """A server's REST API with one bearer token (or none); every call bounded by a timeout."""

    def __init__(self, server: Served, token: str | None, timeout_s: float = 15.0) -> None:
        super().__init__(server.url, token, timeout=60.0)  # a delete waits for the stream's final checkpoint
        self.server = server
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = http_client(server.url, headers=headers, timeout=timeout_s)

    def checkpoint(self, sid: str) -> httpx.Response:
        return self.http.post(f"/api/streams/{sid}/checkpoint", timeout=30.0)

    def checkpoint_now(self, sid: str) -> int:
        """Checkpoint and return the frame count saved (AssertionError with the stream's state if refused)."""
        r = self.checkpoint(sid)
        if r.status_code != 200:
            raise AssertionError(
                f"checkpoint refused: {r.status_code} {r.text}; stream {self.get(sid)}\n"
                f"server log tail:\n{self.server.log_tail(3000)}"
            )
        return r.json()["frames"]

    def wait(self, sid: str, timeout_s: float, what: str, check: Callable[[dict], bool]) -> dict:
        """Poll the stream until ``check(info)`` holds; on timeout the error shows the stream's last state."""
        last: list[dict] = [{}]

        def poll() -> dict | None:
            last[0] = info = self.get(sid)
            return info if check(info) else None

        try:
            return until(poll, timeout_s, what, 0.2)
        except TimeoutError:
            s = last[0]
            brief = {k: s.get(k) for k in BRIEF}
            raise TimeoutError(
                f"stream {sid}: {what}: not within {timeout_s:g} s; last {brief}\n"
                f"server log tail:\n{self.server.log_tail(1500)}"
            ) from None

    def wait_processed(self, sid: str, frames: int, timeout_s: float) -> dict:
        return self.wait(sid, timeout_s, f"{frames} frames processed", lambda s: s["counters"]["processed"] >= frames)

    def metrics(self) -> Scrape:
        r = self.http.get("/metrics")
        r.raise_for_status()
        return Scrape.parse(r.text)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Api:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
