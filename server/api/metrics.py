"""Prometheus metrics, all updated in the API process.

The decoder and learner processes report counts and timings to the API process on their queues (``protocol.py``;
``stream_counts.py`` and ``frame_record.py`` update these metrics): counters survive a killed learner or decoder,
and one scrape of ``/metrics`` sees every stream. Label ``stream`` is the stream id.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from .. import errors

# ΔP and latency buckets: from a fast GPU step (1 ms) to a hopelessly slow one (2.5 s).
TIME_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5)
STATES = ("starting", "running", "reconnecting", "ended", "error")


class Metrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.frame_interval = Gauge(
            "overtime_frame_interval_seconds", "ΔS: target time between frames", ["stream"], registry=r
        )
        self.step = Histogram(
            "overtime_step_seconds", "ΔP: time of one whole pipeline step", ["stream"], buckets=TIME_BUCKETS, registry=r
        )
        self.stage_step = Histogram(
            "overtime_stage_step_seconds",
            "time of one stage's work in a step",
            ["stream", "stage"],
            buckets=TIME_BUCKETS,
            registry=r,
        )
        self.work = Histogram(
            "overtime_frame_work_seconds",
            "a frame's whole work in the worker: scaling, the pipeline step, the zero-flow loss, the pictures",
            ["stream"],
            buckets=TIME_BUCKETS,
            registry=r,
        )
        self.budget_ratio = Gauge(
            "overtime_budget_ratio",
            "a frame's whole work / ΔS, latest frame (> 1: falling behind)",
            ["stream"],
            registry=r,
        )
        self.frames = Counter(
            "overtime_frames",
            "frames by outcome (decoded, processed, dropped) and drop reason",
            ["stream", "outcome", "reason"],
            registry=r,
        )
        self.latency = Histogram(
            "overtime_latency_seconds",
            "capture -> overlay sent to a viewer",
            ["stream"],
            buckets=TIME_BUCKETS,
            registry=r,
        )
        self.loss = Gauge("overtime_loss", "loss of the latest processed frame", ["stream"], registry=r)
        self.loss_zero = Gauge(
            "overtime_loss_zero_flow",
            "the same loss for zero flow on the latest frame: the baseline the learned flow must beat",
            ["stream"],
            registry=r,
        )
        self.reconnects = Counter(
            "overtime_source_reconnects", "source reconnects (decoder restarts)", ["stream"], registry=r
        )
        self.worker_restarts = Counter("overtime_worker_restarts", "worker process restarts", ["stream"], registry=r)
        self.nonfinite = Counter(
            "overtime_nonfinite_losses", "non-finite losses (checkpoint restored, lr halved)", ["stream"], registry=r
        )
        self.checkpoint_failures = Counter(
            "overtime_checkpoint_failures", "checkpoint writes that failed (disk full, ...)", ["stream"], registry=r
        )
        self.sources_refused = Counter(
            "overtime_sources_refused",
            "sources refused, by error code: at the request (400), or at a later hop (redirect, playlist entry)",
            ["code"],
            registry=r,
        )
        self.streams = Gauge("overtime_streams", "streams by state", ["state"], registry=r)
        self.ws_clients = Gauge("overtime_ws_clients", "connected WebSocket viewers", ["stream"], registry=r)
        self.ws_dropped = Counter("overtime_ws_dropped", "frames a slow viewer skipped", ["stream"], registry=r)
        for state in STATES:
            self.streams.labels(state).set(0)
        self.sources_refused.labels(errors.PRIVATE_ADDRESS)  # the series exists (at 0) from the start

    def count_states(self, states: list[str]) -> None:
        for state in STATES:
            self.streams.labels(state).set(sum(s == state for s in states))

    def forget(self, stream: str) -> None:
        """Drop a deleted stream's series so /metrics does not grow with every stream ever made."""
        for metric in (self.frame_interval, self.step, self.work, self.budget_ratio, self.latency, self.loss,
                       self.loss_zero, self.reconnects,
                       self.worker_restarts, self.nonfinite, self.checkpoint_failures, self.ws_clients,
                       self.ws_dropped, self.frames, self.stage_step):  # fmt: skip
            for labels in [key for key in _label_sets(metric) if key[0] == stream]:
                metric.remove(*labels)


def _label_sets(metric: Counter | Gauge | Histogram) -> set[tuple[str, ...]]:
    names = metric._labelnames  # prometheus-client has no public accessor for a metric's label names
    return {tuple(sample.labels[n] for n in names) for family in metric.collect() for sample in family.samples
            if set(names) <= set(sample.labels)}  # fmt: skip
