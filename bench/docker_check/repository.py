"""Where the check's inputs lie in the repository, the names it gives what it makes (images, compose project, cache
folders, ports), and what it reads from the Dockerfiles: one place, so every step agrees on them."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
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
# The comment of a base image made here: ``ensure_base`` remakes only images that carry it (kept as it was when the
# check was one file, so that images made by earlier runs are still recognized).
BASE_MARKER = "made by bench/docker_check.py"
BASE_COMMENT = BASE_MARKER + ": debootstrap --variant=minbase {suite} " + DEBIAN_MIRROR


def dockerfile_facts(path: Path) -> dict[str, str]:
    """The ARG defaults of a Dockerfile and its base image (``FROM``, with ``${ARG}`` resolved)."""
    text = path.read_text()
    facts = dict(re.findall(r"^ARG\s+(\w+)=(\S+)", text, re.M))
    base = re.search(r"^FROM\s+(\S+)", text, re.M)[1]
    facts["FROM"] = re.sub(r"\$\{(\w+)\}", lambda m: facts[m[1]], base)
    return facts
