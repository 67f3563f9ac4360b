"""Step 4: the wheelhouse, every Python package the image installs built on the host, and served as a PyPI-like
index on 127.0.0.1 during the build, so the Dockerfile's pip commands run unchanged with no network."""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import re
import shutil
import sys
import threading
import tomllib
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

from bench.docker_check.repository import DOCKERFILE, IMAGE_PYTHON, ROOT, WHEELHOUSE, WHEELHOUSE_PORT, dockerfile_facts
from bench.docker_check.shell import CheckFailed, free_local_port, log, sh
from testing.net import HOST


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
    """A static file server that keeps pip's requests out of the check's output."""

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
