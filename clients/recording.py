"""What `overtime watch` saves: the overlay video (PyAV, H.264) and one CSV row of metrics per frame."""

from __future__ import annotations

import csv
from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np


def decode_jpeg(data: bytes) -> np.ndarray:
    """JPEG bytes -> RGB uint8 array (H, W, 3); ValueError if the bytes are not an image."""
    bgr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    if bgr is None:
        raise ValueError("the server sent an image that is not a JPEG")
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


def overlay_image(images: dict[str, bytes], opacity: float = 0.6) -> np.ndarray:
    """The picture to record: the server's overlay, or the frame with the flow image blended over it."""
    if "overlay" in images:
        return decode_jpeg(images["overlay"])
    frame, flow = decode_jpeg(images["frame"]), decode_jpeg(images["flow"])
    if flow.shape != frame.shape:
        flow = cv2.resize(flow, (frame.shape[1], frame.shape[0]))
    return cv2.addWeighted(frame, 1 - opacity, flow, opacity, 0)


class VideoRecorder:
    """H.264 in MP4 at the stream's rate, one video frame per received frame (sizes rounded up to even)."""

    def __init__(self, path: Path, fps: float):
        self.path = path
        self.fps = Fraction(fps).limit_denominator(1000)
        self.container = None
        self.stream = None
        self.frames = 0

    def write(self, rgb: np.ndarray) -> None:
        if self.container is None:
            self.container = av.open(str(self.path), "w")
            self.stream = self.container.add_stream("libx264", rate=self.fps)
            self.stream.width = rgb.shape[1] + rgb.shape[1] % 2
            self.stream.height = rgb.shape[0] + rgb.shape[0] % 2
            self.stream.pix_fmt = "yuv420p"
            self.stream.options = {"crf": "20", "preset": "veryfast"}
        if rgb.shape[:2] != (self.stream.height, self.stream.width):
            rgb = cv2.resize(rgb, (self.stream.width, self.stream.height))
        frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24")
        frame.pts = self.frames
        frame.time_base = 1 / self.fps
        self.container.mux(self.stream.encode(frame))
        self.frames += 1

    def close(self) -> None:
        if self.container is not None:
            self.container.mux(self.stream.encode(None))
            self.container.close()
            self.container = None


class MetricsCsv:
    """frame, loss, dp_s, ds_s, latency_s, dropped, stage_0_dp_s, ... — the columns fixed by the first frame."""

    BASE = ["frame", "loss", "dp_s", "ds_s", "latency_s", "dropped"]

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
        self.writer.writerow([m.get(key) for key in self.BASE] + stages)

    def close(self) -> None:
        self.file.close()
