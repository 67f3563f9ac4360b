"""The parts of ``make docker-check`` (bench/docker_check/) that need no Docker engine: what goes into the
wheelhouse, the index pip reads it through, what it reads from the Dockerfiles, and how it judges learned weights.
The check itself builds and runs images, so it is not part of the test suite."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
import torch

from bench.docker_check.checks import CheckFailed, check_not_wrecked
from bench.docker_check.demo_loss import demo_pairs, relative_loss
from bench.docker_check.repository import CUDA_DOCKERFILE, DOCKERFILE, ROOT, dockerfile_facts
from bench.docker_check.wheelhouse import requirements, write_simple_index
from models.flow_nets import WEIGHTS_DIR


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


def shipped() -> dict[str, torch.Tensor]:
    return torch.load(WEIGHTS_DIR / "fast.pt", map_location="cpu", weights_only=True)


def test_a_loss_relative_to_zero_flow_is_not_comparable_across_learning_sizes():
    """Why the check runs both sets of weights on the same pairs at one size instead of comparing the WebSocket's
    first and last loops, between which the service moved the learning size."""
    large = relative_loss("fast", shipped(), demo_pairs(128, 21))
    small = relative_loss("fast", shipped(), demo_pairs(64, 21))
    assert large < 1 and small < 1
    assert small > 1.2 * large


def test_not_wrecked_accepts_gently_adapted_weights_and_rejects_wrecked_ones(monkeypatch):
    pairs = demo_pairs(64, 11)
    monkeypatch.setattr("bench.docker_check.checks.demo_pairs", lambda: pairs)
    weights = shipped()
    gen = torch.Generator().manual_seed(0)
    nudged = {k: v + 1e-4 * torch.randn(v.shape, generator=gen) for k, v in weights.items()}
    result = check_not_wrecked("fast", weights, nudged)
    assert result["pairs"] == 10 and result["size"] == [64, 64]
    assert result["learned_relative"] == pytest.approx(result["shipped_relative"], rel=0.05)
    wrecked = {k: v + 0.3 * torch.randn(v.shape, generator=gen) for k, v in weights.items()}
    with pytest.raises(CheckFailed, match="learning made the net worse"):
        check_not_wrecked("fast", weights, wrecked)
