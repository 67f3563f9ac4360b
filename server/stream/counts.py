"""A stream's counters (``schemas.Counters``, shown by the API) and the Prometheus series that count the same
events: one call updates both, so the two never disagree. Counters survive a killed decoder or learner process:
they live in the API process."""

from __future__ import annotations

from ..api.metrics import Metrics
from ..api.schemas import Counters


class StreamCounts:
    def __init__(self, sid: str, metrics: Metrics) -> None:
        self.sid, self.metrics = sid, metrics
        self.counters = Counters()
        for counter in (metrics.reconnects, metrics.worker_restarts, metrics.nonfinite, metrics.ws_dropped):
            counter.labels(sid)  # series exist (at 0) from the start, as Prometheus prefers
        metrics.frames.labels(sid, "dropped", "worker_behind")

    def decoded(self, n: int) -> None:
        self.counters.decoded += n
        self.metrics.frames.labels(self.sid, "decoded", "").inc(n)

    def dropped(self, reason: str, n: int) -> None:
        """Frames lost (or, ``reason="resample"``, skipped to hold the stream's rate)."""
        if reason == "resample":
            self.counters.resampled += n
        else:
            self.counters.dropped += n
        self.metrics.frames.labels(self.sid, "dropped", reason).inc(n)

    def processed(self) -> None:
        self.counters.processed += 1  # its series: ``FrameRecord.add``, with the frame's timings

    def reconnect(self) -> None:
        self.counters.reconnects += 1
        self.metrics.reconnects.labels(self.sid).inc()

    def learner_restart(self) -> None:
        self.counters.worker_restarts += 1
        self.metrics.worker_restarts.labels(self.sid).inc()

    def nonfinite_loss(self) -> None:
        self.counters.nonfinite_losses += 1
        self.metrics.nonfinite.labels(self.sid).inc()

    def viewers(self, n: int) -> None:
        self.counters.ws_clients = n
        self.metrics.ws_clients.labels(self.sid).set(n)

    def checkpoint_failed(self) -> None:
        self.metrics.checkpoint_failures.labels(self.sid).inc()

    def source_refused(self, code: str) -> None:
        self.metrics.sources_refused.labels(code).inc()

    def rate(self, fps: float) -> None:
        self.metrics.frame_interval.labels(self.sid).set(1.0 / fps)
