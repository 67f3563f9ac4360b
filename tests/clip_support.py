"""Real-looking pictures and a short clip of them, for the benches that film frames of real clips."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import av
import cv2
import numpy as np


def picture(seed: int = 0, height: int = 240, width: int = 320) -> np.ndarray:
    """A smooth random RGB picture: texture at every scale a window of it sees."""
    rng = np.random.default_rng(seed)
    noise = rng.uniform(0, 255, (height // 8, width // 8, 3)).astype(np.float32)
    return cv2.resize(noise, (width, height), interpolation=cv2.INTER_CUBIC).clip(0, 255).astype(np.uint8)


def write_clip(path: Path, frames: int = 12) -> None:
    """An H.264 clip of ``frames`` such pictures, 320x240 at 10 fps."""
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=10)
        stream.width, stream.height, stream.pix_fmt = 320, 240, "yuv420p"
        for i in range(frames):
            container.mux(stream.encode(av.VideoFrame.from_ndarray(picture(i), format="rgb24")))
        container.mux(stream.encode(None))


def run_clip_bench(main: Callable[[list[str]], int], folder: Path, stem: str) -> dict:
    """A clip bench's ``main`` on one frame of a short clip written into ``folder``, its results there too: the data
    of ``stem``.json, which holds that one frame."""
    clip = folder / "clip.mp4"
    write_clip(clip)
    args = ["--video", str(clip), "--every", "5", "--per-clip", "1", "--threads", "1", "--out", str(folder)]
    assert main(args) == 0
    data = json.loads((folder / f"{stem}.json").read_text())
    assert data["frames"] == 1
    return data
