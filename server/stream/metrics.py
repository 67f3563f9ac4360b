"""A stream's Prometheus series, in a registry of its own, updated where the stream's work runs.

Why a registry per stream: the work may run in the API process or in a Ray actor on another machine; either way the
API's ``/metrics`` merges every stream's families with its own (``server.api.metrics``), and a stream that goes
takes its series with it. Label ``stream`` is the stream id, so the merged exposition reads as one registry would.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics_core import Metric

# ΔP and latency buckets: from a fast GPU step (1 ms) to a hopelessly slow one (2.5 s).
TIME_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5)


class StreamMetrics:
    def __init__(self, sid: str) -> None:
        self.registry = r = CollectorRegistry()
        self.frame_interval = Gauge(
            "overtime_frame_interval_seconds", "ΔS: target time between frames", ["stream"], registry=r
        ).labels(sid)
        self.step = Histogram(
            "overtime_step_seconds",
            "ΔP: one whole pipeline step, as long as its slowest stage",
            ["stream"],
            buckets=TIME_BUCKETS,
            registry=r,
        ).labels(sid)
        self._stage_step = Histogram(
            "overtime_stage_step_seconds",
            "one stage's work in a step, its waits for the other stages left out",
            ["stream", "stage"],
            buckets=TIME_BUCKETS,
            registry=r,
        )
        self.work = Histogram(
            "overtime_frame_work_seconds",
            "a frame's whole work in the worker: scaling, its wait for the step, the zero-flow loss, the pictures",
            ["stream"],
            buckets=TIME_BUCKETS,
            registry=r,
        ).labels(sid)
        self.budget_ratio = Gauge(
            "overtime_budget_ratio",
            "a frame's whole work / ΔS, latest frame (> 1: falling behind)",
            ["stream"],
            registry=r,
        ).labels(sid)
        self._frames = Counter(
            "overtime_frames",
            "frames by outcome (decoded, processed, dropped) and drop reason",
            ["stream", "outcome", "reason"],
            registry=r,
        )
        self.loss = Gauge("overtime_loss", "loss of the latest processed frame", ["stream"], registry=r).labels(sid)
        self.loss_zero = Gauge(
            "overtime_loss_zero_flow",
            "the same loss for zero flow on the latest frame: the baseline the learned flow must beat",
            ["stream"],
            registry=r,
        ).labels(sid)
        self.loss_start = Gauge(
            "overtime_loss_start_weights",
            "the same loss for the stream's frozen start (the weights it began with), latest pair it scored",
            ["stream"],
            registry=r,
        ).labels(sid)
        self.versus_start = Gauge(
            "overtime_learning_versus_start",
            "the learner's mean loss over its frozen start's on the made pairs of the last frames the start scored "
            "(< 1: it explains them better than it began)",
            ["stream"],
            registry=r,
        ).labels(sid)
        self.went_back = Counter(
            "overtime_went_back_to_best",
            "times learning fell behind the frozen start over a window and went back to its best weights",
            ["stream"],
            registry=r,
        ).labels(sid)
        self.reconnects = Counter(
            "overtime_source_reconnects", "source reconnects (decoder restarts)", ["stream"], registry=r
        ).labels(sid)
        self.worker_restarts = Counter(
            "overtime_worker_restarts", "worker process restarts", ["stream"], registry=r
        ).labels(sid)
        self.nonfinite = Counter(
            "overtime_nonfinite_losses", "non-finite losses (checkpoint restored, lr halved)", ["stream"], registry=r
        ).labels(sid)
        self.scene_cuts = Counter(
            "overtime_scene_cuts",
            "frames that began a new shot: shown without flow, not learned from",
            ["stream"],
            registry=r,
        ).labels(sid)
        self.checkpoint_failures = Counter(
            "overtime_checkpoint_failures", "checkpoint writes that failed (disk full, ...)", ["stream"], registry=r
        ).labels(sid)
        self.sid = sid
        self.frames("dropped", "worker_behind")  # the series exists (at 0) from the start, as Prometheus prefers

    def frames(self, outcome: str, reason: str = "") -> Counter:
        return self._frames.labels(self.sid, outcome, reason)

    def stage_step(self, stage: int) -> Histogram:
        return self._stage_step.labels(self.sid, str(stage))

    def families(self) -> list[Metric]:
        """Every family with its samples now (picklable: what a Ray actor sends the API)."""
        return list(self.registry.collect())
