"""One scrape of a server's ``/metrics``, read by prometheus-client's own parser (never by hand: a hand parser
disagrees with Prometheus on escapes, label order and exemplars exactly when it matters)."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True)
class Scrape:
    """The samples of one exposition: (sample name, labels, value)."""

    samples: list[tuple[str, dict[str, str], float]]

    @classmethod
    def parse(cls, text: str) -> Scrape:
        return cls([(s.name, s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples])

    def matching(self, name: str, **labels: str) -> list[float]:
        """Values of the samples named ``name`` whose labels include ``labels``."""
        return [v for n, lab, v in self.samples if n == name and labels.items() <= lab.items()]

    def value(self, name: str, **labels: str) -> float:
        """Their sum; 0 when there are none (a labelled counter appears only once it was incremented)."""
        return sum(self.matching(name, **labels))

    def require(self, name: str, **labels: str) -> float:
        """Their sum; AssertionError when the server exposes no such sample."""
        found = self.matching(name, **labels)
        assert found, f"{name}{labels} not in /metrics"
        return sum(found)

    def labels(self) -> dict[str, set[str]]:
        """Sample name -> the label names its samples carry."""
        out: dict[str, set[str]] = {}
        for name, labels, _ in self.samples:
            out.setdefault(name, set()).update(labels)
        return out
