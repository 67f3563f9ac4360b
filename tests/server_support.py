"""What the server's end-to-end tests share: the clips they stream, the server's flags, and small clients."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import cv2
import numpy as np
import websockets

from models.streams import generate, write_mp4
from server.launch import ServerProcess

TOKEN = "test-token"
SIZE = 64
LOOP = 30  # frames of loop.mp4: a window of LOOP consecutive frames shows every frame of it once
FLAGS = (
    "--no-demo-stream",
    "--allow-private",
    "--checkpoint-interval-s",
    "3",
    "--read-timeout-s",
    "2",
    "--open-timeout-s",
    "3",
    "--reconnect-max-s",
    "2",
    "--max-streams",
    "2",
    "--stages",
    "2",
    "--learning-side",  # the clips are 64x64: learn at their own size
    "64",
    "--init",  # these tests watch a net learn from scratch: the loss falls visibly within a few loops
    "scratch",
)


def make_media(work: Path) -> Path:
    """Every clip the server tests stream, under ``work/media`` (the server's media root)."""
    media = work / "media"
    media.mkdir()
    frames = generate(SIZE, 300, seed=1).frames
    write_mp4(frames, media / "clip.mp4", fps=15)  # the streams run at 15 fps: every frame pair has the same time step
    write_mp4(frames[:LOOP], media / "loop.mp4", fps=15)
    write_mp4(frames[:20], media / "short.mp4", fps=25)
    wide = np.stack([cv2.resize(f, (160, 120)) for f in generate(SIZE, 60, seed=2).frames])
    write_mp4(wide, media / "four_three.mp4", fps=12)  # a 4:3 source at its own rate
    (media / "notes.mp4").write_text("this is not a video\n" * 50)
    data = (media / "clip.mp4").read_bytes()
    (media / "truncated.mp4").write_bytes(data[: len(data) // 2])
    write_mp4(frames[:40], work / "a.ts", fps=25)
    big = np.stack([cv2.resize(f, (96, 96)) for f in frames[40:80]])
    write_mp4(big, work / "b.ts", fps=25)
    (media / "resized.ts").write_bytes((work / "a.ts").read_bytes() + (work / "b.ts").read_bytes())
    return media


def create(srv: ServerProcess, **body) -> dict:
    r = srv.client.post("/api/streams", json=body)
    assert r.status_code == 201, r.text
    return r.json()


def delete(srv: ServerProcess, sid: str) -> None:
    assert srv.client.delete(f"/api/streams/{sid}").status_code == 204


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


def decode(jpeg: bytes) -> np.ndarray:
    return cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR).astype(np.float32)


def metric(text: str, name: str, **labels: str) -> float:
    """Sum of the samples of ``name`` whose labels include ``labels``."""
    total, found = 0.0, False
    for line in text.splitlines():
        named = line.startswith(name + "{") or line.startswith(name + " ")
        if named and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
            found = True
    assert found, f"{name}{labels} not in /metrics"
    return total


def loss_falls(frames: list[tuple[dict, bytes]]) -> tuple[float, float]:
    """Median loss of the first and the last LOOP frames of a looping loop.mp4 stream.

    Each window holds every frame pair of the loop once, so both see the same content and differ only
    in the weights (a frame's loss depends on how much it moves: first vs last frames of a clip would
    compare motion, not learning). Medians: the loop's wrap-around is one outlier pair."""
    losses = [m["loss"] for m, _ in frames]
    assert len(losses) >= 2 * LOOP
    return float(np.median(losses[:LOOP])), float(np.median(losses[-LOOP:]))
