"""A real Overtime server in a subprocess and the clients that load it: the one mechanism shared by
``bench/load.py``, ``bench/soak.py`` and the reliability tests (faults, fuzzing, security).

Everything talks to 127.0.0.1 only, and every wait is bounded in time: a server that does not come up, a stream
that never reaches a state, a viewer that hears nothing — each ends in a clear ``TimeoutError``.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import psutil
from prometheus_client.parser import text_string_to_metric_families

from server.launch import ServerProcess, free_port

ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"
TOKEN = "reliability-token"


def make_video(path: Path, frames: int = 60, size: int = 64, fps: int = 15, seed: int = 0) -> Path:
    """A small H.264 file with real motion (the flow nets' own ground-truth generator)."""
    from models.streams import generate, write_mp4

    path.parent.mkdir(parents=True, exist_ok=True)
    write_mp4(generate(size=size, frames=frames, seed=seed).frames, path, fps=fps)
    return path


def until(check, timeout_s: float, what: str, poll_s: float = 0.1):
    """Poll ``check()`` until it returns something truthy; its value, or TimeoutError saying ``what``."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(poll_s)
    raise TimeoutError(f"{what}: not reached within {timeout_s:g} s (last: {last!r})")


class Server(ServerProcess):
    """``overtime serve`` (``server.launch``) with the API token and 64x64 streams by default, ``settings`` as
    ``OVERTIME_*`` env vars, and a view of its whole process tree (API, decoders, workers, helpers)."""

    def __init__(self, root: Path, token: str | None = TOKEN, settings: dict[str, str] | None = None) -> None:
        super().__init__(root, token=token)
        self.env |= {"OVERTIME_WIDTH": "64", "OVERTIME_HEIGHT": "64", "OVERTIME_DEMO_STREAM": "false"}
        self.env |= {"PYTHONUNBUFFERED": "1"} | (settings or {})
        self.root = Path(root)
        self.tmpfs: Path | None = None  # set by tests that put the checkpoint dir on a tiny filesystem

    @property
    def media_dir(self) -> Path:
        return self.workdir / "media"

    @property
    def checkpoint_dir(self) -> Path:
        return self.workdir / "checkpoints"

    def start(self, timeout_s: float = 90.0) -> Server:
        self.media_dir.mkdir(parents=True, exist_ok=True)
        self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        return super().start(timeout_s)

    def stop(self, timeout_s: float = 60.0) -> int | None:
        """Graceful stop (streams checkpoint); whatever of the tree outlives it is killed, never left running."""
        tree = self.processes()[1:]
        code = super().stop(timeout_s)
        _, alive = psutil.wait_procs(tree, timeout=10)
        for p in alive:
            with contextlib.suppress(psutil.Error):
                p.kill()
        return code

    def processes(self) -> list[psutil.Process]:
        """The server first, then every process it started."""
        try:
            parent = psutil.Process(self.proc.pid)
            return [parent, *parent.children(recursive=True)]
        except (psutil.NoSuchProcess, AttributeError):
            return []

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""

    def api(self, token: str | None = ...) -> Api:
        return Api(self, self.token if token is ... else token)

    def ws_endpoint(self, path: str, token: str | None = ...) -> str:
        token = self.token if token is ... else token
        return f"ws://{HOST}:{self.port}{path}" + (f"?token={token}" if token else "")


class Api:
    """The REST API with the bearer token; every call bounded by a timeout."""

    def __init__(self, server: Server, token: str | None, timeout_s: float = 15.0) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.server = server
        self.http = httpx.Client(base_url=server.url, headers=headers, timeout=timeout_s)

    def create(self, source: str, **body) -> dict:
        r = self.http.post("/api/streams", json={"source": source, **body})
        if r.status_code != 201:
            raise AssertionError(f"POST /api/streams {source!r} -> {r.status_code} {r.text}")
        return r.json()

    def stream(self, sid: str) -> dict:
        r = self.http.get(f"/api/streams/{sid}")
        r.raise_for_status()
        return r.json()

    def delete(self, sid: str) -> None:
        self.http.delete(f"/api/streams/{sid}", timeout=60.0)

    def checkpoint(self, sid: str) -> httpx.Response:
        return self.http.post(f"/api/streams/{sid}/checkpoint", timeout=30.0)

    def checkpoint_now(self, sid: str) -> int:
        """Checkpoint and return the frame count saved (AssertionError with the stream's state if refused)."""
        r = self.checkpoint(sid)
        if r.status_code != 200:
            raise AssertionError(
                f"checkpoint refused: {r.status_code} {r.text}; stream {self.stream(sid)}\n"
                f"server log tail:\n{self.server.log_tail(3000)}"
            )
        return r.json()["frames"]

    def wait(self, sid: str, timeout_s: float, what: str, check) -> dict:
        """Poll the stream until ``check(info)`` holds; on timeout the error shows the stream's last state."""
        last: list[dict] = [{}]

        def poll() -> dict | None:
            last[0] = info = self.stream(sid)
            return info if check(info) else None

        try:
            return until(poll, timeout_s, what, 0.2)
        except TimeoutError:
            s = last[0]
            brief = {k: s.get(k) for k in ("state", "error", "counters", "pids", "resumed_from", "checkpoint_frames")}
            raise TimeoutError(
                f"stream {sid}: {what}: not within {timeout_s:g} s; last {brief}\n"
                f"server log tail:\n{self.server.log_tail(1500)}"
            ) from None

    def wait_processed(self, sid: str, frames: int, timeout_s: float) -> dict:
        return self.wait(sid, timeout_s, f"{frames} frames processed", lambda s: s["counters"]["processed"] >= frames)

    def metrics(self) -> Metrics:
        r = self.http.get("/metrics")
        r.raise_for_status()
        return Metrics.parse(r.text)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Api:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass
class Metrics:
    """One scrape of ``/metrics`` (parsed by prometheus-client's own parser)."""

    samples: list[tuple[str, dict[str, str], float]]

    @classmethod
    def parse(cls, text: str) -> Metrics:
        return cls([(s.name, s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples])

    def value(self, name: str, **labels: str) -> float:
        """Sum of the samples named ``name`` whose labels include ``labels`` (0 when there are none)."""
        return sum(v for n, lab, v in self.samples if n == name and labels.items() <= lab.items())


class LiveSource:
    """A live HTTP MPEG-TS source on loopback: Debian's ffmpeg playing a file in real time, looping, listening for
    one client. ``start()`` returns once ffmpeg listens; ``stop()`` is the source going away; ``start()`` again is it
    coming back on the same URL."""

    def __init__(self, video: Path, port: int | None = None) -> None:
        self.video = video
        self.port = port or free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}/live.ts"

    def start(self) -> LiveSource:
        cmd = [
            "ffmpeg",
            "-nostdin",
            "-hide_banner",
            "-loglevel",
            "error",
            "-re",
            "-stream_loop",
            "-1",
            "-i",
            str(self.video),
            "-c",
            "copy",
            "-f",
            "mpegts",
            "-listen",
            "1",
            self.url,
        ]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        until(self._listening, 30, f"ffmpeg listening on {self.url}", 0.05)
        return self

    def _listening(self) -> bool:
        """Asked of the kernel, not by connecting: ffmpeg's ``-listen 1`` serves its first client only."""
        if self.proc.poll() is not None:
            raise RuntimeError(f"ffmpeg exited with {self.proc.returncode} before listening on {self.url}")
        with contextlib.suppress(psutil.NoSuchProcess):
            sockets = psutil.Process(self.proc.pid).net_connections("tcp")
            return any(s.status == psutil.CONN_LISTEN and s.laddr.port == self.port for s in sockets)
        return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def __enter__(self) -> LiveSource:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class ApiProbe:
    """Times REST calls from a thread at a fixed pace while something else loads the server (bounded count)."""

    def __init__(self, api: Api, sid: str, period_s: float = 0.2, max_calls: int = 100_000) -> None:
        import threading

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

    def __exit__(self, *exc) -> None:
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
