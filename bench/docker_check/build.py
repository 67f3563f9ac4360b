"""Step 5: ``docker build`` of the images the check runs, and what the built ``overtime:cpu`` holds."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import subprocess
import time
import tomllib
from pathlib import Path

from bench.docker_check.repository import IMAGE, IMAGE_PYTHON, ROOT, WORK
from bench.docker_check.shell import CheckFailed, docker, log, sh


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
