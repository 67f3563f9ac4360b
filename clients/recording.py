"""What `overtime watch` saves: a video of one of the pictures (PyAV, H.264) timed by the frames' capture times, one
Middlebury `.flo` file of the flow per frame, and one CSV row of metrics per frame."""

from __future__ import annotations

import csv
from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np

PICTURES = ("overlay", "frame", "flow")  # what --save can record
MILLISECOND = Fraction(1, 1000)
#: A picture whose shape is within this share of the video's is stretched onto it: the learning sizes' rounding to
#: multiples of 8 changes their shape by a few per cent. Beyond it (a phone turned) it is fitted in, between bars.
SAME_SHAPE = 0.1


def decode_jpeg(data: bytes) -> np.ndarray:
    """JPEG bytes -> RGB uint8 array (H, W, 3); ValueError if the bytes are not an image."""
    bgr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    if bgr is None:
        raise ValueError("the server sent an image that is not a JPEG")
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


class VideoRecorder:
    """H.264 in MP4 with each frame at its capture time (millisecond timestamps, first frame at 0): a session that
    took 16.8 s makes a 16.8 s video, whatever the rate frames arrived at. Sizes are rounded up to even."""

    def __init__(self, path: Path, fps: float):
        self.path = path
        self.fps = Fraction(fps).limit_denominator(1000)  # nominal only: the last frame lasts 1/fps
        self.container = None
        self.stream = None
        self.frames = 0
        self.start: float | None = None
        self.last_pts = -1

    def write(self, rgb: np.ndarray, capture_time: float) -> None:
        if self.container is None:
            self.container = av.open(str(self.path), "w")
            self.stream = self.container.add_stream("libx264", rate=self.fps)
            self.stream.width = rgb.shape[1] + rgb.shape[1] % 2
            self.stream.height = rgb.shape[0] + rgb.shape[0] % 2
            self.stream.pix_fmt = "yuv420p"
            self.stream.options = {"crf": "20", "preset": "veryfast"}
            self.stream.codec_context.time_base = self.stream.time_base = MILLISECOND
            self.start = capture_time
        if rgb.shape[:2] != (self.stream.height, self.stream.width):
            rgb = fitted(rgb, self.stream.width, self.stream.height)
        frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24")
        frame.pts = self.last_pts = max(round((capture_time - self.start) * 1000), self.last_pts + 1)
        frame.time_base = MILLISECOND
        self.container.mux(self.stream.encode(frame))
        self.frames += 1

    def close(self) -> None:
        if self.container is not None:
            self.container.mux(self.stream.encode(None))
            self.container.close()
            self.container = None


def fitted(rgb: np.ndarray, width: int, height: int) -> np.ndarray:
    """``rgb`` on a ``width`` x ``height`` picture: stretched where its shape is about the same (``SAME_SHAPE``), else
    scaled to fit and centred between black bars, as players show a video turned on its side."""
    h, w = rgb.shape[:2]
    if abs(np.log(w * height / (h * width))) <= SAME_SHAPE:
        return cv2.resize(rgb, (width, height))
    scale = min(width / w, height / h)
    inner = cv2.resize(rgb, (max(1, round(w * scale)), max(1, round(h * scale))))
    out = np.zeros((height, width, 3), np.uint8)
    top, left = (height - inner.shape[0]) // 2, (width - inner.shape[1]) // 2
    out[top : top + inner.shape[0], left : left + inner.shape[1]] = inner
    return out


class FlowFiles:
    """One Middlebury `.flo` per frame in a folder, named by the frame's index (the bytes as the server sent them)."""

    def __init__(self, folder: Path):
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)

    def write(self, frame: int, flo: bytes) -> None:
        (self.folder / f"{frame:06d}.flo").write_bytes(flo)


class MetricsCsv:
    """frame, capture_time, loss, loss_zero, dp_s, work_s, ds_s, latency_s, dropped, scene_cut (1 where the frame
    began a new shot), stage_0_dp_s, ... (the stage columns fixed by the first frame). A frame whose step learned from
    a pair known nowhere has no losses: empty cells (``models.known_motion.KnownMotion``)."""

    BASE = ["frame", "capture_time", "loss", "loss_zero", "dp_s", "work_s", "ds_s", "latency_s", "dropped", "scene_cut"]

    def __init__(self, path: Path):
        self.file = path.open("w", newline="")
        self.writer = csv.writer(self.file)
        self.stages: int | None = None

    def write(self, m: dict) -> None:
        stages = list(m.get("stage_dp_s") or [])
        if self.stages is None:
            self.stages = len(stages)
            self.writer.writerow(self.BASE + [f"stage_{k}_dp_s" for k in range(self.stages)])
        stages = (stages + [None] * self.stages)[: self.stages]
        row = [m.get(key) for key in self.BASE]
        row[self.BASE.index("scene_cut")] = int(bool(m.get("scene_cut")))
        self.writer.writerow(row + stages)

    def close(self) -> None:
        self.file.close()
