"""Step 6: the compose project the checks run against, and waiting on its containers and the demo stream."""

from __future__ import annotations

import contextlib
import json
import os
import re
from datetime import datetime

import httpx

from bench.docker_check.engine import compose_command
from bench.docker_check.repository import COMPOSE_FILES, PROJECT, ROOT, SCRAPE_CONFIG, WORK
from bench.docker_check.shell import CheckFailed, docker, free_local_port, sh
from testing.net import HOST, http_client
from testing.poll import until


class Stack:
    """The compose project ``overtime-check``: docker-compose.yml with docker-compose.check.yml, on the ports and
    scrape config chosen here. The caller's OVERTIME_/PROMETHEUS_/GRAFANA_ variables are dropped so that the
    files' defaults are what runs."""

    def __init__(self) -> None:
        self.command = compose_command()
        self.port = free_local_port(8000)
        self.prometheus_port = free_local_port(9090)
        self.scrape_config = SCRAPE_CONFIG
        if self.port != 8000:  # the repository's config with only the target's port changed
            text = SCRAPE_CONFIG.read_text()
            if '"overtime:8000"' not in text:
                raise CheckFailed(f"{SCRAPE_CONFIG.relative_to(ROOT)} no longer names the target overtime:8000")
            self.scrape_config = WORK / "prometheus.yml"
            self.scrape_config.write_text(text.replace('"overtime:8000"', f'"overtime:{self.port}"'))
        keep = {k: v for k, v in os.environ.items() if not k.startswith(("OVERTIME_", "PROMETHEUS_", "GRAFANA_"))}
        self.env = keep | {"CHECK_OVERTIME_PORT": str(self.port), "CHECK_PROMETHEUS_PORT": str(self.prometheus_port),
                           "CHECK_PROMETHEUS_CONFIG": str(self.scrape_config)}  # fmt: skip
        self.api = http_client(f"http://{HOST}:{self.port}", timeout=10)
        self.prometheus = http_client(f"http://{HOST}:{self.prometheus_port}", timeout=10)

    def __call__(self, *args: str, timeout_s: float = 300) -> str:
        """``docker compose ARGS`` on the project, from the repository root; its stdout."""
        files = [a for f in COMPOSE_FILES for a in ("-f", str(f))]
        return sh([*self.command, "-p", PROJECT, *files, *args], timeout_s=timeout_s, env=self.env, cwd=ROOT).stdout

    def version(self) -> str:
        """The Compose version, for the report."""
        return sh([*self.command, "version", "--short"]).stdout.strip()

    def up(self, *services: str) -> str:
        """Start ``services`` (never building or pulling); returns the overtime container's id."""
        self("up", "-d", "--no-build", "--pull", "never", *services)
        return self("ps", "-q", "overtime").strip()

    def stream(self, name: str = "demo") -> dict | None:
        """The stream ``name`` as GET /api/streams lists it; None while it is not listed or the API does not answer."""
        with contextlib.suppress(httpx.HTTPError, ValueError):
            return next((s for s in self.api.get("/api/streams").json() if s["name"] == name), None)
        return None

    def logs(self, lines: int = 60) -> str:
        """The containers' last log lines, for a failure's message (empty when compose cannot give them)."""
        with contextlib.suppress(CheckFailed):
            return self("logs", "--no-color", "--tail", str(lines), "overtime", "prometheus")
        return ""


def inspect(container: str) -> dict:
    """``docker inspect`` of one container."""
    return json.loads(docker("inspect", container))[0]


def timestamp(text: str) -> float:
    """Seconds since the epoch of Docker's RFC 3339 times (nanoseconds, which datetime does not parse)."""
    match = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)", text)
    zone = "+00:00" if match[3] == "Z" else match[3]
    return datetime.fromisoformat(match[1] + zone).timestamp() + float("0." + (match[2] or "0"))


def running(container: str) -> dict:
    """The container's state; CheckFailed as soon as it is no longer running."""
    state = inspect(container)["State"]
    if state["Status"] != "running":
        raise CheckFailed(f"the overtime container is {state['Status']} (exit {state['ExitCode']})")
    return state


def wait_demo(stack: Stack, container: str, timeout_s: float = 300) -> dict:
    """The demo stream once the API lists it; fails early when the container stops."""

    def listed() -> dict | None:
        running(container)
        return stack.stream()

    return until(listed, timeout_s, "the demo stream listed by GET /api/streams", 0.5)


def wait_ready(stack: Stack, container: str, timeout_s: float = 300) -> dict:
    """The demo stream once its worker is ready (``resumed_from`` set): the decoder holds the first frame until
    then, so a viewer that connects now sees the stream from its first frames."""

    def ready() -> dict | None:
        running(container)
        info = stack.stream()
        return info if info and info["resumed_from"] is not None else None

    return until(ready, timeout_s, "the demo stream's worker ready (resumed_from set)", 0.2)
