"""A stream's processed frames as the API shows them: their metrics, the charts' history (a page opened or reloaded
later draws its charts whole), the newest flow field (``GET /api/streams/{id}/flow``), and the message each viewer
gets."""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import asdict

from .metrics import StreamMetrics
from .pictures import FramePictures
from .protocol import FrameLearned

HISTORY_POINTS = 600  # frames of chart history kept per stream
HISTORY_KEYS = ("frame", "loss", "loss_zero", "start_scored", "dp_s", "work_s", "ds_s", "stage_dp_s")


class FrameRecord:
    def __init__(self, metrics: StreamMetrics) -> None:
        self.metrics = metrics
        self.history: deque[dict] = deque(maxlen=HISTORY_POINTS)
        self.latest: tuple[int, FramePictures] | None = None  # the newest frame's index and pictures

    def add(self, m: FrameLearned, dropped: int) -> tuple[dict, FramePictures]:
        """Record what the learner process sent for a frame; the viewers' message and the frame's pictures."""
        ds, metrics = m.ds_s, self.metrics
        metrics.frame_interval.set(ds)
        metrics.frames("processed").inc()
        metrics.step.observe(m.dp_s)
        metrics.work.observe(m.work_s)
        metrics.budget_ratio.set(m.work_s / ds)
        for stage, seconds in enumerate(m.stage_dp_s):
            if seconds is not None:
                metrics.stage_step(stage).observe(seconds)
        scored = asdict(m.start_scored) if m.start_scored is not None else None
        start = scored["loss_start"] if scored is not None else None
        losses = ((metrics.loss, m.loss), (metrics.loss_zero, m.loss_zero), (metrics.loss_start, start))
        for gauge, value in losses:
            if value is not None and math.isfinite(value):
                gauge.set(value)
        message = {
            "type": "frame", "frame": m.frame, "loss": m.loss, "loss_zero": m.loss_zero, "start_scored": scored,
            "dp_s": m.dp_s,
            "work_s": m.work_s, "ds_s": ds, "stage_dp_s": m.stage_dp_s, "dropped": dropped,
            "capture_time": m.capture_time, "learning_size": list(m.learning_size), "flow_scale": m.flow_scale,
            "scene_cut": m.scene_cut,
        }  # fmt: skip
        pictures = FramePictures(m.images, m.flow)
        self.latest = (m.frame, pictures)
        latency = time.time() - m.capture_time
        self.history.append({**{k: message[k] for k in HISTORY_KEYS}, "latency_s": latency, "dropped": dropped})
        return message, pictures
