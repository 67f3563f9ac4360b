"""What the load and soak benchmarks measure on a loaded server: API latency from a paced probe thread, and each
process's memory and file descriptors."""

from __future__ import annotations

import contextlib
import threading
import time

import httpx
import numpy as np
import psutil

from testing.api import Api


class ApiProbe:
    """Times REST calls from a thread at a fixed pace while something else loads the server (bounded count)."""

    def __init__(self, api: Api, sid: str, period_s: float = 0.2, max_calls: int = 100_000) -> None:
        self.api, self.sid, self.period_s, self.max_calls = api, sid, period_s, max_calls
        self.latencies: dict[str, list[float]] = {"list": [], "get": [], "metrics": [], "healthz": []}
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        calls = {
            "list": "/api/streams",
            "get": f"/api/streams/{self.sid}",
            "metrics": "/metrics",
            "healthz": "/healthz",
        }
        for i in range(self.max_calls):
            kind = list(calls)[i % len(calls)]
            t0 = time.perf_counter()
            try:
                ok = self.api.http.get(calls[kind]).status_code == 200
            except httpx.HTTPError:
                ok = False
            self.latencies[kind].append(time.perf_counter() - t0)
            self.errors += not ok
            if self._stop.wait(self.period_s):
                return

    def __enter__(self) -> ApiProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def summary(self) -> dict:
        every = [x for v in self.latencies.values() for x in v]
        out = {
            "calls": len(every),
            "errors": self.errors,
            "p50_ms": 1e3 * percentile(every, 50),
            "p95_ms": 1e3 * percentile(every, 95),
            "max_ms": 1e3 * max(every, default=float("nan")),
        }
        out |= {f"p95_{k}_ms": 1e3 * percentile(v, 95) for k, v in self.latencies.items()}
        return {k: round(v, 2) if isinstance(v, float) else v for k, v in out.items()}


def rss_and_fds(procs: list[psutil.Process], roles: dict[int, str]) -> dict[int, dict]:
    """Resident memory (bytes) and open file descriptors of each live process, by pid; ``roles`` names them."""
    out = {}
    for p in procs:
        with contextlib.suppress(psutil.Error), p.oneshot():
            out[p.pid] = {
                "name": p.name(),
                "cmd": roles.get(p.pid) or " ".join(p.cmdline()[-2:])[-40:],
                "rss": p.memory_info().rss,
                "fds": p.num_fds(),
            }
    return out


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")
