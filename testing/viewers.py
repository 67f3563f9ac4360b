"""Viewers of a stream's WebSocket: the tests' collectors of frames and images, and the benchmarks' viewers, fast
or deliberately slow, counting what arrives (those run in a process of their own, ``ViewerPool``, so the clients'
CPU never shows up as API latency in the process that measures).
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import websockets

from testing.net import HOST
from testing.server import ServerProcess


@dataclass
class ViewerStats:
    frames: int = 0  # JSON frame messages received
    losses: list[float] = field(default_factory=list)  # the loss of each of those frames, in order
    losses_zero: list[float] = field(default_factory=list)  # the loss of zero flow on the same pairs
    sizes: list[tuple[int, int]] = field(default_factory=list)  # the learning size of each of those frames
    captured: list[float] = field(default_factory=list)  # and its capture time (receipt time - latency_s)
    images: int = 0  # binary messages received
    notices: list[dict] = field(default_factory=list)
    closed: str | None = None  # why the connection ended early, if it did


async def view(url: str, duration_s: float, read_delay_s: float = 0.0) -> ViewerStats:
    """Watch a stream for ``duration_s``; a positive ``read_delay_s`` makes a slow reader that takes one message per
    delay, with a small socket buffer and a one-message queue so the server really sees it lag."""
    stats = ViewerStats()
    slow = read_delay_s > 0
    sock = socket.socket()
    if slow:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(5.0)
    sock.connect((HOST, urlsplit(url).port))
    sock.setblocking(False)
    deadline = time.monotonic() + duration_s
    try:
        async with websockets.connect(
            url,
            sock=sock,
            max_queue=1 if slow else 64,
            ping_interval=None if slow else 20,  # a slow reader would miss its own pongs behind queued frames
            open_timeout=10,
            max_size=2**24,
        ) as ws:
            while (left := deadline - time.monotonic()) > 0:
                try:
                    msg = await asyncio.wait_for(ws.recv(), timeout=left)
                except TimeoutError:
                    break
                if isinstance(msg, bytes):
                    stats.images += 1
                else:
                    data = json.loads(msg)
                    if "frame" in data and "loss" in data:
                        stats.frames += 1
                        stats.losses.append(data["loss"])
                        zero = data.get("loss_zero")  # None before the learner has a pair; 0.0 is a value
                        stats.losses_zero.append(float("nan") if zero is None else zero)
                        stats.sizes.append(tuple(data.get("learning_size", (0, 0))))
                        stats.captured.append(time.time() - data.get("latency_s", 0.0))
                    else:
                        stats.notices.append(data)
                if slow:
                    await asyncio.sleep(read_delay_s)
    except websockets.ConnectionClosed as exc:
        who, frame = ("server", exc.rcvd) if exc.rcvd else ("client", exc.sent)
        stats.closed = f"{who} closed after {duration_s - (deadline - time.monotonic()):.0f} s: {frame}"
    finally:
        sock.close()
    return stats


def _viewers_main(url: str, fast: int, slow: int, duration_s: float, read_delay_s: float, out) -> None:
    async def everyone() -> list[ViewerStats]:
        tasks = [view(url, duration_s) for _ in range(fast)] + [
            view(url, duration_s, read_delay_s) for _ in range(slow)
        ]
        return await asyncio.gather(*tasks)

    out.send([vars(s) for s in asyncio.run(everyone())])
    out.close()


class ViewerPool:
    """``fast + slow`` viewers of one stream in a separate process, so the clients' own CPU never shows up as API
    latency in the measuring process. ``result()`` gives one ``ViewerStats`` per viewer, fast ones first."""

    def __init__(self, url: str, fast: int, slow: int = 0, duration_s: float = 60.0, read_delay_s: float = 0.5):
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        self._recv, send = ctx.Pipe(duplex=False)
        self.duration_s = duration_s
        self.proc = ctx.Process(target=_viewers_main, args=(url, fast, slow, duration_s, read_delay_s, send))
        self.proc.start()
        send.close()

    def result(self, grace_s: float = 60.0) -> list[ViewerStats]:
        if not self._recv.poll(self.duration_s + grace_s):
            self.proc.kill()
            raise TimeoutError("the viewers did not report")
        stats = [ViewerStats(**s) for s in self._recv.recv()]
        self.proc.join(10)
        return stats


def watch(srv: ServerProcess, sid: str, frames: int, timeout_s: float = 90.0) -> list[tuple[dict, bytes]]:
    """Collect ``frames`` (JSON, JPEG) pairs from the stream's WebSocket."""

    async def run() -> list[tuple[dict, bytes]]:
        got: list[tuple[dict, bytes]] = []
        async with websockets.connect(srv.ws(f"/ws/streams/{sid}"), max_size=2**22) as ws:
            async with asyncio.timeout(timeout_s):
                while len(got) < frames:
                    message = json.loads(await ws.recv())
                    if message["type"] == "frame":
                        got.append((message, await ws.recv()))
        return got

    return asyncio.run(run())


def watch_images(srv: ServerProcess, sid: str, images: str) -> tuple[dict, list[bytes]]:
    """One frame from ``/ws/streams/{sid}?images=...``: its JSON and the images that follow it (or the error)."""

    async def run() -> tuple[dict, list[bytes]]:
        async with websockets.connect(srv.ws(f"/ws/streams/{sid}?images={images}"), max_size=2**22) as ws:
            async with asyncio.timeout(60):
                while (message := json.loads(await ws.recv()))["type"] not in ("frame", "error"):
                    pass
                count = len(message.get("images", [])) if message["type"] == "frame" else 0
                return message, [await ws.recv() for _ in range(count)]

    return asyncio.run(run())
