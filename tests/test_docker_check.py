"""The parts of ``make docker-check`` (bench/docker_check/) that need no Docker engine: what goes into the
wheelhouse, the index pip reads it through, and what it reads from the Dockerfiles. The check itself builds and
runs images, so it is not part of the test suite."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

from bench.docker_check.repository import CUDA_DOCKERFILE, DOCKERFILE, ROOT, dockerfile_facts
from bench.docker_check.wheelhouse import requirements, write_simple_index


def test_dockerfile_facts_resolve_the_base_and_the_torch_version():
    assert dockerfile_facts(DOCKERFILE)["FROM"] == "debian:bookworm-slim"
    cuda = dockerfile_facts(CUDA_DOCKERFILE)
    assert cuda["FROM"] == cuda["CUDA_IMAGE"] and cuda["FROM"].startswith("nvidia/cuda:")


def test_the_wheelhouse_holds_what_the_image_installs():
    """The Dockerfile's torch, every dependency of pyproject.toml and the build backend of the editable install."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    reqs = requirements()
    assert reqs[0] == f"torch=={dockerfile_facts(DOCKERFILE)['TORCH_VERSION']}"
    assert set(pyproject["project"]["dependencies"]) <= set(reqs)
    assert set(pyproject["build-system"]["requires"]) <= set(reqs)


def tiny_wheel(directory: Path, name: str, version: str) -> Path:
    """A valid, empty wheel: enough for pip to read its name and version."""
    stem = f"{name.replace('-', '_')}-{version}"
    path = directory / f"{stem}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr(f"{stem}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        wheel.writestr(
            f"{stem}.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        wheel.writestr(f"{stem}.dist-info/RECORD", "")
    return path


def test_simple_index_is_what_pip_reads_as_an_index(tmp_path: Path):
    """pip resolves requirements through the generated PEP 503 pages alone: names normalized, local versions
    (torch's +cpu) matched by a plain ``==``."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for name, version in [("Pillow", "10.0.0"), ("typing_extensions", "4.0.0"), ("demo-pkg", "1.0+cpu")]:
        tiny_wheel(wheels, name, version)
    assert write_simple_index(wheels) == 3
    assert {p.name for p in (wheels / "simple").iterdir()} == {"index.html", "pillow", "typing-extensions", "demo-pkg"}
    assert 'href="../../demo_pkg-1.0%2Bcpu-py3-none-any.whl"' in (wheels / "simple/demo-pkg/index.html").read_text()
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--isolated", "--no-deps", "-q", "-d", str(out),
         "--index-url", (wheels / "simple").as_uri(), "demo-pkg==1.0", "typing-extensions", "pillow"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in wheels.glob("*.whl"))
