"""A real ``overtime serve`` in a subprocess on a free loopback port, for the tests and the benchmarks.

Why a subprocess and not the app in-process: the service forks decoders and workers, handles SIGTERM and writes
checkpoints on the way out; only a real process shows all of that. Every wait is bounded, and whatever of the
process tree outlives a stop is killed, never left running.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import psutil

from testing.api import Api
from testing.metrics import Scrape
from testing.net import HOST, free_port, http_client
from testing.poll import until
from testing.processes import is_fork_server, outlived, running

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "reliability-token"  # the token of ``small_server``
SMALL = {"OVERTIME_WIDTH": "64", "OVERTIME_HEIGHT": "64", "OVERTIME_DEMO_STREAM": "false"}


class ServerProcess:
    """``with ServerProcess(workdir, "--allow-private", token="t") as srv: srv.client.post("/api/streams", ...)``

    ``flags`` go on the command line, ``settings`` into the environment as ``OVERTIME_*`` variables; media,
    checkpoints, cache and the log live under ``workdir``; ``checkout`` is the code it runs (another one's
    ``server`` package, with this interpreter, for a benchmark against it). ``client`` is raw HTTP with the token
    (for tests of status codes); ``api()`` the API client."""

    def __init__(
        self,
        workdir: Path,
        *flags: str,
        token: str | None = None,
        port: int | None = None,
        settings: dict[str, str] | None = None,
        checkout: Path = ROOT,
    ) -> None:
        self.workdir, self.checkout = Path(workdir), Path(checkout)
        self.port = port or free_port()
        self.url = f"http://{HOST}:{self.port}"
        self.ws_url = f"ws://{HOST}:{self.port}"
        self.log_path = self.workdir / f"server-{self.port}.log"
        self.cmd = [sys.executable, "-m", "server.cli", "serve", "--host", HOST, "--port", str(self.port),
                    "--media-dir", str(self.media_dir), "--checkpoint-dir", str(self.checkpoint_dir),
                    "--cache-dir", str(self.workdir / "cache"), *flags]  # fmt: skip
        self.token = token
        self.env = {**os.environ, "OVERTIME_TOKEN": token or "", "PYTHONUNBUFFERED": "1", **(settings or {})}
        self.proc: subprocess.Popen | None = None
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.client = http_client(self.url, timeout=30.0, headers=headers)
        self._api = Api(self, token, timeout_s=30.0)

    @property
    def media_dir(self) -> Path:
        return self.workdir / "media"

    @property
    def checkpoint_dir(self) -> Path:
        return self.workdir / "checkpoints"

    def start(self, timeout_s: float = 90.0) -> ServerProcess:
        self.media_dir.mkdir(parents=True, exist_ok=True)
        self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child keeps it
        self.proc = subprocess.Popen(self.cmd, cwd=self.checkout, stdout=log, stderr=subprocess.STDOUT, env=self.env)
        try:
            until(self._healthy, timeout_s, "the server answering /healthz", 0.2)
        except TimeoutError:
            self.stop()
            raise TimeoutError(f"server did not answer within {timeout_s} s: {self.log_tail()}") from None
        return self

    def _healthy(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"server exited with {self.proc.returncode}: {self.log_tail()}")
        try:
            return self.client.get("/healthz").status_code == 200
        except httpx.TransportError:
            return False

    def stop(self, timeout_s: float = 60.0) -> int | None:
        """SIGTERM (graceful: streams stop, workers checkpoint), SIGKILL if it hangs; then whatever of its process
        tree outlived it is killed."""
        if self.proc is None:
            return None
        tree = self.processes()[1:]
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        # The fork server, orphaned, has nothing left to do, but exits only once it has loaded what it preloads: a
        # server stopped within seconds of its start waited for that (2-3 s); its forks end as they would.
        for p in filter(is_fork_server, running(tree)):
            with contextlib.suppress(psutil.Error):
                p.terminate()
        for p in outlived(tree, 10):
            with contextlib.suppress(psutil.Error):
                p.kill()
        return self.proc.returncode

    def processes(self) -> list[psutil.Process]:
        """The server first, then every process it started (API, decoders, workers, helpers)."""
        try:
            parent = psutil.Process(self.proc.pid)
            return [parent, *parent.children(recursive=True)]
        except (psutil.NoSuchProcess, AttributeError):
            return []

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""

    def api(self, token: str | None = ...) -> Api:  # type: ignore[assignment] - ``...``: this server's token
        """A new API client (close it, or use it as a context manager); ``token=None`` calls without one."""
        return Api(self, self.token if token is ... else token)

    def ws(self, path: str, token: str | None = ...) -> str:  # type: ignore[assignment] - as in ``api``
        """WebSocket URL of ``path``, the token in the query as browsers send it."""
        token = self.token if token is ... else token
        separator = "&" if "?" in path else "?"
        return f"{self.ws_url}{path}" + (f"{separator}token={token}" if token else "")

    def stream(self, sid: str) -> dict:
        return self._api.get(sid)

    def wait_for(self, sid: str, predicate: Callable[[dict], bool], timeout_s: float = 60.0, what: str = "") -> dict:
        """Poll a stream's info until ``predicate(info)``; TimeoutError with its last state when it never holds."""
        return self._api.wait(sid, timeout_s, what or "condition", predicate)

    def metrics(self) -> Scrape:
        return self._api.metrics()

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self.client.close()
        self._api.close()


def small_server(workdir: Path, token: str | None = TOKEN, settings: dict[str, str] | None = None) -> ServerProcess:
    """The reliability tests' and load benchmarks' server: a token, 64x64 streams and no demo stream by default."""
    return ServerProcess(workdir, token=token, settings=SMALL | (settings or {}))
