"""A stream's counters (``Counters``, shown by the API) and the Prometheus series that count the same events: one
call updates both, so the two never disagree. Counters survive a killed decoder or learner process: they live with
the stream's work (``work.py``), not in its processes."""

from __future__ import annotations

from pydantic import BaseModel

from .metrics import StreamMetrics


class Counters(BaseModel):
    decoded: int = 0
    processed: int = 0
    dropped: int = 0  # lost frames: worker_behind (the worker could not keep up), decode_error
    resampled: int = 0  # source frames skipped to hold the stream's fps
    reconnects: int = 0
    worker_restarts: int = 0
    nonfinite_losses: int = 0
    went_back_to_best: int = 0  # times learning fell behind the frozen start and went back to its best weights
    scene_cuts: int = 0  # frames that began a new shot: shown without flow, not learned from
    ws_clients: int = 0  # filled in by the API process, which holds the viewers


class StreamCounts:
    def __init__(self, metrics: StreamMetrics) -> None:
        self.metrics = metrics
        self.counters = Counters()

    def decoded(self, n: int) -> None:
        self.counters.decoded += n
        self.metrics.frames("decoded").inc(n)

    def dropped(self, reason: str, n: int) -> None:
        """Frames lost (or, ``reason="resample"``, skipped to hold the stream's rate)."""
        if reason == "resample":
            self.counters.resampled += n
        else:
            self.counters.dropped += n
        self.metrics.frames("dropped", reason).inc(n)

    def processed(self) -> None:
        self.counters.processed += 1  # its series: ``FrameRecord.add``, with the frame's timings

    def scene_cut(self) -> None:
        self.counters.scene_cuts += 1
        self.metrics.scene_cuts.inc()

    def reconnect(self) -> None:
        self.counters.reconnects += 1
        self.metrics.reconnects.inc()

    def learner_restart(self) -> None:
        self.counters.worker_restarts += 1
        self.metrics.worker_restarts.inc()

    def nonfinite_loss(self) -> None:
        self.counters.nonfinite_losses += 1
        self.metrics.nonfinite.inc()

    def went_back_to_best(self) -> None:
        self.counters.went_back_to_best += 1
        self.metrics.went_back.inc()

    def checkpoint_failed(self) -> None:
        self.metrics.checkpoint_failures.inc()

    def rate(self, fps: float) -> None:
        self.metrics.frame_interval.set(1.0 / fps)
