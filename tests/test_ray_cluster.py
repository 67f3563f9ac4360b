"""Guards around the service's Ray cluster mode (the cluster itself: tests/test_cluster.py): one pinned Ray, none
imported without ``--ray-address``, and no cluster scenario run outside a loopback-only namespace."""

from __future__ import annotations

import socket
import subprocess
import sys
import tomllib

import pytest

from testing import netns

pytestmark = pytest.mark.realtime


def test_the_pinned_ray_is_the_one_installed():
    """The cluster extra and the test extra pin one Ray, and the tests run with it."""
    import ray

    project = tomllib.loads((netns.ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    pins = {r for r in project["cluster"] + project["test"] if r.startswith("ray")}
    assert pins == {f"ray=={ray.__version__}"}


def test_the_service_does_not_import_ray():
    """Without --ray-address nothing changes: the API process's modules must not pull Ray in (it costs 0.6-2 s)."""
    code = "import sys, server.cli, server.api.app, server.placement; print('ray' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], cwd=netns.ROOT, capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "False", proc.stderr[-2000:]


def test_the_cluster_scenario_refuses_to_run_outside_a_namespace(tmp_path):
    """Ray advertises the machine's interface address: outside a namespace with only loopback, traffic could leave."""
    if [name for _, name in socket.if_nameindex()] == ["lo"]:
        pytest.skip("this machine has only loopback: inside and outside look the same")
    out = tmp_path / "result.json"
    proc = subprocess.run([sys.executable, "-m", "bench.cluster", "--inside", str(out)], cwd=netns.ROOT,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 2 and "namespace" in proc.stderr
    assert not out.exists()
