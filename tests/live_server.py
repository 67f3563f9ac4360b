"""A real Overtime server in a uvicorn subprocess on 127.0.0.1, for end-to-end client tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

APP = os.environ.get("OVERTIME_TEST_APP", "server.app:create_app")  # an app factory reading OVERTIME_* settings
ROOT = Path(__file__).resolve().parent.parent
READY_TIMEOUT_S = 60.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def live_server(workdir: Path, **settings: str) -> Iterator[str]:
    """Starts the server (loopback sources allowed, media and checkpoints under workdir); yields its base URL."""
    port = free_port()
    env = {
        **os.environ,
        "OVERTIME_MEDIA_DIR": str(workdir / "media"),
        "OVERTIME_CHECKPOINT_DIR": str(workdir / "checkpoints"),
        "OVERTIME_WEB_DIR": str(ROOT / "clients" / "web"),
        "OVERTIME_ALLOW_PRIVATE": "true",
        **{f"OVERTIME_{k.upper()}": v for k, v in settings.items()},
    }
    log = (workdir / f"server-{port}.log").open("w")
    cmd = [sys.executable, "-m", "uvicorn", APP, "--factory", "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with {proc.returncode}: {(workdir / log.name).read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(url + "/readyz", timeout=2) as res:
                    if res.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"server not ready after {READY_TIMEOUT_S} s")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
        log.close()
