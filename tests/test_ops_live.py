"""The monitoring stack against the real thing: a live Overtime server learning on the bundled demo, scraped by a
real Prometheus server (Debian's package) running the repository's scrape config and alert rules.

- every series and label that a dashboard panel or an alert reads is on the live server's /metrics (dashboards
  cannot silently rot when a metric is renamed);
- Prometheus scrapes ΔP (whole step and per stage) and ΔS with sane values, loads and evaluates every alert rule,
  and runs every dashboard query."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import httpx
import pytest
import yaml

from testing.metrics import Scrape
from testing.net import free_port
from testing.server import ServerProcess
from tests.ops_support import (
    COMPOSE,
    DOCKERFILES,
    PROMETHEUS_CONFIG,
    PROMETHEUS_DIR,
    Query,
    alert_queries,
    alert_rules,
    dashboard_queries,
    dashboard_variable_queries,
    find_tool,
    instructions,
    load_yaml,
    missing_from_exposition,
)

pytestmark = [pytest.mark.realtime, pytest.mark.slow]

DEMO_FPS = 10.0
SERVE_FLAGS = (
    "--demo-stream",
    # Small frames: the test needs ΔP and ΔS series, not a good flow, and shares 2 cores with the rest of the suite.
    *("--fps", str(DEMO_FPS), "--width", "64", "--height", "64"),
    # A generous stall timeout: on a loaded machine the worker's start (torch import, model build) can outlast the
    # default, and stall detection is the server tests' business, not this one's.
    *("--read-timeout-s", "60"),
)
T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], timeout: float, process: subprocess.Popen) -> T:
    """Poll `probe` until it returns something truthy; fail after `timeout` seconds, or as soon as `process` (the
    server being waited on) has exited."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"{what}: {process.args[0]} exited with {process.returncode}")
        try:
            result = probe()
        except httpx.HTTPError:
            result = None
        if result:
            return result
        time.sleep(0.25)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")


class Viewer:
    """One WebSocket viewer of a stream, reading in a thread (bounded in time) so that the viewer-side series
    (latency capture -> overlay sent, clients) exist as they do in production."""

    def __init__(self, url: str, limit_s: float = 300.0) -> None:
        self.frames = 0
        self.error: BaseException | None = None
        self._url = url
        self._stop = threading.Event()
        self._deadline = time.monotonic() + limit_s
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        from websockets.sync.client import connect

        try:
            with connect(self._url, open_timeout=30) as socket_:
                while not self._stop.is_set() and time.monotonic() < self._deadline:
                    try:
                        self.frames += isinstance(socket_.recv(timeout=0.5), bytes)
                    except TimeoutError:
                        continue
        except Exception as exc:  # reported by the fixture that waits on this viewer
            self.error = exc

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


@dataclass(frozen=True)
class LiveServer:
    url: str
    stream: str
    address: str  # host:port, as a scrape target


@pytest.fixture(scope="module")
def overtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """`overtime serve` as docker-compose.yml runs it (the demo stream started with the server), on a free loopback
    port, small frames at DEMO_FPS, and one viewer."""
    with ServerProcess(tmp_path_factory.mktemp("overtime"), *SERVE_FLAGS) as server:
        (demo,) = [s for s in server.client.get("/api/streams").json() if s["name"] == "demo"]
        assert demo["fps"] == DEMO_FPS and demo["source"] == "demo"
        stream = demo["id"]
        viewer = Viewer(f"{server.ws_url}/ws/streams/{stream}")
        try:
            server.wait_for(stream, lambda info: info["counters"]["processed"] >= 3, 120, "three processed frames")
            deadline = time.monotonic() + 30
            while viewer.frames < 3 and viewer.error is None and time.monotonic() < deadline:
                time.sleep(0.25)
            assert viewer.frames >= 3, f"the viewer got {viewer.frames} overlays ({viewer.error!r})"
            yield LiveServer(server.url, stream, f"127.0.0.1:{server.port}")
        finally:
            viewer.close()


def compose_prometheus_flags(config: Path, storage: Path) -> list[str]:
    """The prometheus service's command in docker-compose.yml (its ${VAR:-default}s at their defaults), with the
    container's config and storage paths replaced by local ones: Prometheus refuses unknown or malformed flags."""
    command = load_yaml(COMPOSE)["services"]["prometheus"]["command"]
    flags = [re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", flag) for flag in command]
    local = {"--config.file": config, "--storage.tsdb.path": storage}
    assert local.keys() <= {flag.split("=")[0] for flag in flags}
    return [f"{name}={local[name]}" if name in local else flag for flag in flags for name in [flag.split("=")[0]]]


@pytest.fixture(scope="module")
def prometheus(overtime: LiveServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Prometheus started with docker-compose.yml's flags and running the repository's config, retargeted from
    the compose service to the live server and sped up (1 s scrapes and evaluations) so that a test sees several
    samples within seconds."""
    binary = find_tool("prometheus", "apt-get install -y prometheus (Debian's package; run here without systemd)")
    tmp = tmp_path_factory.mktemp("prometheus")
    config = load_yaml(PROMETHEUS_CONFIG)
    config["global"] |= {"scrape_interval": "1s", "evaluation_interval": "1s"}
    config["rule_files"] = [str(PROMETHEUS_DIR / name) for name in config["rule_files"]]
    (job,) = [job for job in config["scrape_configs"] if job["job_name"] == "overtime"]
    assert job["static_configs"] == [{"targets": ["overtime:8000"]}], "the repo's scrape config changed shape"
    job["static_configs"] = [{"targets": [overtime.address]}]
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))

    address = f"127.0.0.1:{free_port()}"
    log = tmp / "prometheus.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [
                binary,
                *compose_prometheus_flags(tmp / "prometheus.yml", tmp / "data"),
                f"--web.listen-address={address}",
            ],
            stdout=out,
            stderr=out,
        )
    url = f"http://{address}"
    try:
        wait_for("Prometheus ready", lambda: httpx.get(f"{url}/-/ready", timeout=5).status_code == 200, 30, process)

        step_count = f'overtime_step_seconds_count{{stream="{overtime.stream}"}}'
        wait_for("4 scrapes of ΔP", lambda: query(url, f"count_over_time({step_count}[1m]) >= 4"), 30, process)

        def rules_evaluated() -> bool:
            groups = httpx.get(f"{url}/api/v1/rules", timeout=5).json()["data"]["groups"]
            rules = [rule for group in groups for rule in group["rules"]]
            return len(rules) == len(alert_rules()) and all(rule["health"] == "ok" for rule in rules)

        wait_for("every alert rule evaluated", rules_evaluated, 20, process)
        yield url
    except BaseException:
        print(log.read_text(errors="replace")[-4000:], file=sys.stderr)
        raise
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def query(prometheus: str, expr: str) -> list[dict]:
    """Instant query; a malformed expression is a test failure with Prometheus's own message."""
    response = httpx.get(f"{prometheus}/api/v1/query", params={"query": expr}, timeout=10)
    body = response.json()
    assert response.status_code == 200 and body["status"] == "success", f"{expr}: {body.get('error', body)}"
    return body["data"]["result"]


def values(prometheus: str, expr: str) -> dict[str, float]:
    """{label set as text: value} of an instant vector."""
    return {str(sorted(r["metric"].items())): float(r["value"][1]) for r in query(prometheus, expr)}


# --- the live server's exposition --------------------------------------------------------------------------------


def test_every_series_a_dashboard_or_alert_reads_is_exposed(overtime: LiveServer):
    text = httpx.get(f"{overtime.url}/metrics", timeout=10).text
    exposed = Scrape.parse(text).labels()
    reads = dashboard_queries() + dashboard_variable_queries() + alert_queries()
    assert len(reads) >= 15
    problems = [problem for q in reads for problem in missing_from_exposition(q, exposed)]
    assert not problems, "dashboards/alerts read what the server does not expose:\n" + "\n".join(problems)


def test_the_exposition_check_catches_a_renamed_metric(overtime: LiveServer):
    """The check above is not vacuous: a panel reading a renamed series or a missing label is reported."""
    exposed = Scrape.parse(httpx.get(f"{overtime.url}/metrics", timeout=10).text).labels()
    renamed = Query("test", 'rate(overtime_step_second_count{stream=~"$stream"}[5m])')
    unlabelled = Query("test", "sum by (camera) (overtime_loss)")
    assert missing_from_exposition(renamed, exposed) == ["test: series overtime_step_second_count is not exposed"]
    assert missing_from_exposition(unlabelled, exposed) == ["test: no series it reads has label 'camera'"]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_the_image_healthcheck_passes_on_a_live_server_and_fails_on_a_dead_one(overtime: LiveServer, dockerfile):
    """The images' HEALTHCHECK command itself, run here against the live server (and a port nobody listens on)."""
    (healthcheck,) = [args for op, args in instructions(dockerfile) if op == "HEALTHCHECK"]
    program, *args = json.loads(healthcheck.split(" CMD ", 1)[1])
    assert program == "python"
    port = overtime.address.rsplit(":", 1)[1]
    alive = subprocess.run([sys.executable, *args], env={"OVERTIME_PORT": port}, capture_output=True, timeout=30)
    assert alive.returncode == 0, alive.stderr
    dead = subprocess.run([sys.executable, *args], env={"OVERTIME_PORT": str(free_port())}, capture_output=True,
                          timeout=30)  # fmt: skip
    assert dead.returncode != 0


# --- a real Prometheus scraping it -------------------------------------------------------------------------------


def test_prometheus_scrapes_the_live_server(prometheus: str, overtime: LiveServer):
    (target,) = httpx.get(f"{prometheus}/api/v1/targets", timeout=5).json()["data"]["activeTargets"]
    assert target["health"] == "up", target.get("lastError")
    assert target["labels"]["job"] == "overtime" and target["scrapeUrl"] == f"http://{overtime.address}/metrics"


def test_delta_s_is_the_stream_frame_interval(prometheus: str, overtime: LiveServer):
    (delta_s,) = values(prometheus, f'overtime_frame_interval_seconds{{stream="{overtime.stream}"}}').values()
    assert delta_s == pytest.approx(1 / DEMO_FPS)


def test_delta_p_of_the_step_and_of_each_stage_are_sane(prometheus: str, overtime: LiveServer):
    selector = f'stream="{overtime.stream}"'
    (steps,) = values(prometheus, f"overtime_step_seconds_count{{{selector}}}").values()
    assert steps >= 3
    (mean_step,) = values(
        prometheus, f"overtime_step_seconds_sum{{{selector}}} / overtime_step_seconds_count{{{selector}}}"
    ).values()
    assert 0 < mean_step < 10, f"mean ΔP {mean_step} s"
    stages = {
        r["metric"]["stage"]: float(r["value"][1])
        for r in query(
            prometheus,
            f"overtime_stage_step_seconds_sum{{{selector}}} / overtime_stage_step_seconds_count{{{selector}}}",
        )
    }
    assert stages, "no per-stage ΔP series"
    for stage, mean_stage in stages.items():
        # A step lasts as long as its slowest stage (a stage process started early works outside the host's wait).
        assert 0 < mean_stage <= mean_step * 1.05 + 1e-3, f"stage {stage}: {mean_stage} s vs step {mean_step} s"
    (ratio,) = values(prometheus, f"overtime_budget_ratio{{{selector}}}").values()
    assert math.isfinite(ratio) and 0 < ratio < 100, f"ΔP/ΔS = {ratio}"


def test_alert_rules_load_and_a_processing_stream_trips_no_stream_alert(prometheus: str, overtime: LiveServer):
    """The stream processes frames and is not in error, so neither alert about that may even be pending. (Budget
    and drop alerts depend on how loaded the machine is; alerts_test.yml pins their logic.)"""
    groups = httpx.get(f"{prometheus}/api/v1/rules", timeout=5).json()["data"]["groups"]
    loaded = {rule["name"]: rule for group in groups for rule in group["rules"]}
    assert set(loaded) == {rule["alert"] for rule in alert_rules()}
    assert all(loaded[name]["lastEvaluation"] for name in loaded)
    active = httpx.get(f"{prometheus}/api/v1/alerts", timeout=5).json()["data"]["alerts"]
    tripped = [a for a in active if a["labels"]["alertname"] in {"OvertimeNoFrames", "OvertimeStreamError"}]
    assert not tripped, f"alerts on a stream that processes frames: {tripped}"


def test_every_dashboard_query_runs_and_shows_data(prometheus: str):
    """On the demo (a source thinned to DEMO_FPS, so 'resample' drops exist) with one viewer, no panel is empty."""
    empty = [q.origin for q in dashboard_queries() if not query(prometheus, q.for_prometheus())]
    assert not empty, f"panels with no data: {empty}"
