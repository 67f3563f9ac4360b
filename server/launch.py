"""Run a real ``overtime serve`` in a subprocess on a free 127.0.0.1 port — for the tests and the benchmark."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """``with ServerProcess(workdir, "--allow-private") as srv: srv.post("/api/streams", json=...)``"""

    def __init__(self, workdir: Path, *flags: str, token: str | None = None, port: int | None = None):
        self.workdir = Path(workdir)
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.ws_url = f"ws://127.0.0.1:{self.port}"
        self.log_path = self.workdir / f"server-{self.port}.log"
        self.cmd = [sys.executable, "-m", "server.cli", "serve", "--host", "127.0.0.1", "--port", str(self.port),
                    "--media-dir", str(self.workdir / "media"), "--checkpoint-dir", str(self.workdir / "checkpoints"),
                    "--cache-dir", str(self.workdir / "cache"), *flags]  # fmt: skip
        self.token = token
        self.env = {**os.environ, "OVERTIME_TOKEN": token or ""}
        self.proc: subprocess.Popen | None = None
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.client = httpx.Client(base_url=self.url, timeout=30.0, headers=headers)

    def start(self, timeout_s: float = 90.0) -> ServerProcess:
        self.workdir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child keeps it
        self.proc = subprocess.Popen(self.cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=self.env)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}: {self.log()}")
            try:
                if self.client.get("/healthz").status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"server did not answer within {timeout_s} s: {self.log()}")

    def stop(self, timeout_s: float = 60.0) -> int | None:
        """SIGTERM (graceful: streams stop, workers checkpoint), then SIGKILL if it hangs."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""

    def stream(self, sid: str) -> dict:
        return self.client.get(f"/api/streams/{sid}").json()

    def wait_for(self, sid: str, predicate, timeout_s: float = 60.0, what: str = "condition") -> dict:
        """Poll a stream's info until ``predicate(info)``; AssertionError with the info when it never holds."""
        deadline = time.monotonic() + timeout_s
        info = self.stream(sid)
        while not predicate(info):
            if time.monotonic() > deadline:
                raise AssertionError(f"stream never reached {what} in {timeout_s} s: {info}\n{self.log()}")
            time.sleep(0.25)
            info = self.stream(sid)
        return info

    def ws(self, path: str) -> str:
        """WebSocket URL of ``path`` (token in the query, as browsers send it)."""
        separator = "&" if "?" in path else "?"
        return f"{self.ws_url}{path}" + (f"{separator}token={self.token}" if self.token else "")

    def metrics(self) -> str:
        return self.client.get("/metrics").text

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self.client.close()
