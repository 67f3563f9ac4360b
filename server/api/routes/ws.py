"""WebSockets: watch a stream learn, and push browser-webcam frames into one.

``WS /ws/streams/{id}[?token=...][&images=...]`` — server to viewer, per processed frame, TWO messages in this order:

1. text, JSON::

     {"type": "frame", "frame": 812,          # true frame index (PARTIME: D-1 steps behind the newest input)
      "loss": 0.0412,                         # the learner's loss on what this frame's step learned from
      "loss_zero": 0.0650,                    # the same loss for zero flow on the same pair (the baseline)
      "dp_s": 0.031, "ds_s": 0.1,             # ΔP (whole pipeline step) and ΔS (1/fps or the source's pace), s
      "work_s": 0.045,                        # the worker's whole work on this frame (the budget it keeps)
      "stage_dp_s": [0.029, 0.030],           # ΔP of each stage in that step
      "capture_time": 1712345678.25,          # when the decoder captured the frame (Unix time, seconds)
      "latency_s": 0.152,                     # capture -> this message being sent
      "learning_size": [160, 120],            # the size the network learns at (the flow's own size)
      "flow_scale": 2.4,                      # speed at the rim of the colour wheel, pixels of the picture per frame
      "dropped": 0}                           # frames the stream dropped so far (worker behind, decode errors)

2. binary: the picture(s). By default one JPEG, the picture's size: the frame tinted by the colours of its learned
   flow (hue = direction, saturation = speed, white = no motion; ``server/stream/pictures.py``).

   With ``?images=frame,flow`` (any of ``overlay``, ``frame``, ``flow``, ``flow16``, ``flo``, in the order wanted)
   the JSON message also says ``"images": ["frame", "flow"]`` and one binary message of each kind follows it, in
   that order. ``frame`` and ``flow`` are JPEGs of the picture's size; ``flow16`` (KITTI's 16-bit PNG) and ``flo``
   (Middlebury) are the flow field itself, at the learning size, in pixels of the learning size
   (``server/stream/flow_formats.py``).

Also text JSON, whenever they happen: ``{"type": "state", "state": "starting|running|reconnecting|ended|error",
"error": {"code", "message"} | null, "phase": "what a starting stream is doing" | null}`` (one is sent on connect),
and ``{"type": "error", "code", "message"}`` right before the server closes the socket (bad token: close code 1008;
unknown stream: 4404). A slow viewer only gets the newest frame; skipped frames count in
``overtime_ws_dropped_total``.

``WS /ws/streams/{id}/ingest[?token=...]`` — browser to server: binary messages, each one JPEG frame of the
webcam (any size; the decoder scales it). Only for streams created with ``"source": "webcam"``. A text message,
a message that is not a JPEG (close 1003), one over 4 MiB (1009) or more than max(2 x fps, 30) frames a second
(1008) gets ``{"type": "error", "code": "bad_frame" | "ingest_flood", "message"}`` and a closed socket.
"""

from __future__ import annotations

import asyncio
import json
import time

from fastapi import APIRouter, WebSocket, WebSocketDisconnect

from ... import errors
from ...stream.pictures import KINDS
from ..deps import websocket_token_ok
from ..manager import RequestError
from ..session import StreamSession

router = APIRouter(tags=["websocket"])
POLICY_VIOLATION = 1008
UNSUPPORTED_DATA = 1003
MESSAGE_TOO_BIG = 1009
MAX_INGEST_BYTES = 4 * 2**20  # a webcam JPEG is tens of kB
NOT_FOUND = 4404


async def _open(ws: WebSocket, stream_id: str) -> StreamSession | None:
    """Accept, then authenticate and find the stream; on failure send an error frame and close."""
    await ws.accept()
    if not websocket_token_ok(ws):
        await _refuse(ws, errors.UNAUTHORIZED, "missing or wrong API token (?token=...)", POLICY_VIOLATION)
        return None
    try:
        return ws.app.state.manager.get(stream_id)
    except RequestError as exc:
        await _refuse(ws, exc.code, exc.message, NOT_FOUND)
        return None


async def _refuse(ws: WebSocket, code: str, message: str, close_code: int) -> None:
    await ws.send_text(json.dumps({"type": "error", "code": code, "message": message}))
    await ws.close(close_code)


@router.websocket("/ws/streams/{stream_id}")
async def watch(ws: WebSocket, stream_id: str) -> None:
    session = await _open(ws, stream_id)
    if session is None:
        return
    kinds = [k for k in ws.query_params.get("images", "overlay").split(",") if k]
    if not kinds or set(kinds) - set(KINDS):
        await _refuse(ws, errors.BAD_REQUEST, f"images: a comma-separated list of {', '.join(KINDS)}", POLICY_VIOLATION)
        return
    viewer = session.broadcaster.join(kinds)
    for notice in session.snapshot().notices():
        viewer.offer_notice(notice)
    latency = session.metrics.latency.labels(session.id)
    pump = asyncio.create_task(_pump(ws, viewer, latency, kinds))
    listen = asyncio.create_task(_until_disconnect(ws))
    try:
        await asyncio.wait({pump, listen}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        pump.cancel()
        listen.cancel()
        session.broadcaster.leave(viewer)


async def _pump(ws: WebSocket, viewer, latency, kinds: list[str]) -> None:
    named = {"images": kinds} if kinds != ["overlay"] else {}  # the default layout goes unnamed, as documented
    while True:
        kind, item = await viewer.next()
        if kind == "notice":
            await ws.send_text(json.dumps(item))
            continue
        message, pictures = item
        images = [pictures.get(name) for name in kinds]
        if any(image is None for image in images):
            continue  # rendered before the worker knew this viewer wants it: the next frame will have it
        message = {**message, **named, "latency_s": time.time() - message["capture_time"]}
        latency.observe(message["latency_s"])
        await ws.send_text(json.dumps(message))
        for image in images:
            await ws.send_bytes(image)


async def _until_disconnect(ws: WebSocket) -> None:
    try:
        while True:
            await ws.receive_text()
    except (WebSocketDisconnect, RuntimeError, KeyError):
        return


@router.websocket("/ws/streams/{stream_id}/ingest")
async def ingest(ws: WebSocket, stream_id: str) -> None:
    session = await _open(ws, stream_id)
    if session is None:
        return
    if session.cfg.spec.kind != "webcam":
        await _refuse(ws, errors.BAD_SOURCE, f"stream {stream_id} is not a webcam stream", POLICY_VIOLATION)
        return
    budget = FrameBudget(max(2 * (session.snapshot().fps or 0.0), 30.0))
    try:
        while True:
            message = await ws.receive()
            if message["type"] == "websocket.disconnect":
                return
            problem = _frame_problem(message.get("bytes"), budget)
            if problem is not None:
                await _refuse(ws, *problem)
                return
            session.work.push_jpeg(message["bytes"])
    except (WebSocketDisconnect, RuntimeError):
        return


def _frame_problem(data: bytes | None, budget: FrameBudget) -> tuple[str, str, int] | None:
    """Why a pushed message is refused — (error code, message, close code) — or None for a JPEG within budget.
    Only the JPEG markers are checked here (cheap, on the event loop); the decoder skips and counts the rest."""
    if data is None:
        return errors.BAD_FRAME, "ingest takes binary messages, one JPEG image each", UNSUPPORTED_DATA
    if len(data) > MAX_INGEST_BYTES:
        return errors.BAD_FRAME, f"a frame of {len(data)} bytes; at most {MAX_INGEST_BYTES}", MESSAGE_TOO_BIG
    if not data.startswith(b"\xff\xd8\xff") or b"\xff\xd9" not in data[-16:]:
        return errors.BAD_FRAME, "not a JPEG image (no start or end marker)", UNSUPPORTED_DATA
    if not budget.take():
        return errors.INGEST_FLOOD, f"more than {budget.rate:g} frames per second", POLICY_VIOLATION
    return None


class FrameBudget:
    """A token bucket: ``rate`` frames a second on average, bursts of up to one second's worth."""

    def __init__(self, rate: float) -> None:
        self.rate = self.tokens = rate
        self._at = time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.rate, self.tokens + (now - self._at) * self.rate)
        self._at = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True
