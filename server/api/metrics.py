"""The API process's Prometheus series, and ``/metrics``: them and every stream's own (``server.stream.metrics``).

Why merged here: a stream's series are updated where its work runs, in this process or in a Ray actor on another
node; the scrape merges their families with this process's into one exposition (series of the same name and labels
summed: a source refused at the request here and one refused at a later hop in the stream's decoder are one
counter). Label ``stream`` is the stream id.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics_core import Metric

from .. import errors
from ..stream.metrics import TIME_BUCKETS

STATES = ("starting", "running", "reconnecting", "ended", "error")


class ServerMetrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.latency = Histogram(
            "overtime_latency_seconds",
            "capture -> overlay sent to a viewer",
            ["stream"],
            buckets=TIME_BUCKETS,
            registry=r,
        )
        self.sources_refused = Counter(
            "overtime_sources_refused",
            "sources refused, by error code: at the request (400), or at a later hop (redirect, playlist entry)",
            ["code"],
            registry=r,
        )
        self.streams = Gauge("overtime_streams", "streams by state", ["state"], registry=r)
        self.waiting_for_room = Gauge(
            "overtime_streams_waiting_for_room",
            "streams whose node was lost and that no node of the cluster has room for (state reconnecting)",
            registry=r,
        )
        self.ws_clients = Gauge("overtime_ws_clients", "connected WebSocket viewers", ["stream"], registry=r)
        self.ws_dropped = Counter("overtime_ws_dropped", "frames a slow viewer skipped", ["stream"], registry=r)
        self.sources_refused.labels(errors.PRIVATE_ADDRESS)  # the series exists (at 0) from the start

    def count_states(self, states: Iterable[str]) -> None:
        states = list(states)
        for state in STATES:
            self.streams.labels(state).set(sum(s == state for s in states))

    def count_waiting_for_room(self, stream_errors: Iterable[dict[str, str] | None]) -> None:
        """How many streams wait for a node with room, from each stream's error (``errors.WAITING_FOR_ROOM``)."""
        self.waiting_for_room.set(sum((e or {}).get("code") == errors.WAITING_FOR_ROOM for e in stream_errors))

    def viewers(self, stream: str, n: int) -> None:
        self.ws_clients.labels(stream).set(n)
        self.ws_dropped.labels(stream)  # from the first viewer on, the series exists at 0

    def forget(self, stream: str) -> None:
        """Drop a deleted stream's series so /metrics does not grow with every stream ever made."""
        for metric in (self.latency, self.ws_clients, self.ws_dropped):
            if (stream,) in _label_sets(metric):
                metric.remove(stream)

    def exposition(self, streams: Iterable[list[Metric]]) -> bytes:
        """Prometheus text of this process's series and every stream's families, merged by name."""
        merged: dict[str, Metric] = {}
        for families in [list(self.registry.collect()), *streams]:
            for family in families:
                into = merged.get(family.name)
                if into is None:
                    into = merged[family.name] = Metric(family.name, family.documentation, family.type, family.unit)
                into.samples.extend(family.samples)
        for family in merged.values():
            family.samples = _summed(family.samples)
        return generate_latest(_Families(list(merged.values())))


def _summed(samples: list) -> list:
    """Samples of the same name and labels (one series reported by two places) as one."""
    by_series: dict[tuple, object] = {}
    for s in samples:
        key = (s.name, tuple(sorted(s.labels.items())))
        before = by_series.get(key)
        if before is None:
            by_series[key] = s
        elif not s.name.endswith("_created"):  # a creation time is not added up: the first one stands
            by_series[key] = s._replace(value=before.value + s.value)
    return list(by_series.values())


class _Families:
    """What ``generate_latest`` takes: anything with ``collect()``."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families


def _label_sets(metric: Counter | Gauge | Histogram) -> set[tuple[str, ...]]:
    names = metric._labelnames  # prometheus-client has no public accessor for a metric's label names
    return {tuple(sample.labels[n] for n in names) for family in metric.collect() for sample in family.samples
            if set(names) <= set(sample.labels)}  # fmt: skip
