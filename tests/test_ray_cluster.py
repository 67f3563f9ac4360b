"""A real multi-node Ray cluster on this machine (testing.ray_cluster): separate raylets on 127.0.0.1, each scenario
in a network namespace of its own (testing.netns), skipped with the reason where none can be made. The ground the
service's cluster mode (issue 34) stands on: placement by resources, a registry actor that outlives its driver, an
actor that comes back on a surviving node, and no address off loopback. About 15 s per scenario on 2 cores.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from testing import netns

AVAILABLE, REASON = netns.namespace_available()
SCENARIO_TIMEOUT_S = 180  # a scenario takes 15-20 s on a loaded 2-core machine; this only stops a hang
NOTICED_WITHIN_S = 10.0  # Ray marks a killed node dead after about 2.5 s here (its defaults: 15-20 s)
BACK_WITHIN_S = 20.0  # the lost node's actor answers again from the head: about 3.5 s here (the issue allows 60)
BYSTANDER_WAIT_S = 2.0  # the bound on a viewer's gap for streams on surviving nodes


def scenario(name: str, directory: Path) -> dict[str, Any]:
    """Run ``testing.ray_scenarios NAME`` in a namespace of its own; what it saw, after checking it cleaned up."""
    out = directory / f"{name}.json"
    proc = netns.run_module("testing.ray_scenarios", name, "--out", str(out), timeout_s=SCENARIO_TIMEOUT_S)
    assert proc.returncode == 0, f"scenario {name} exited with {proc.returncode}:\n{proc.stderr[-4000:]}"
    result = json.loads(out.read_text())
    assert result["leftover_processes"] == [], "the cluster left processes behind"
    print(f"{name}: {json.dumps({k: v for k, v in result.items() if k.endswith('_s')})}")
    return result


def loopback(address: str) -> bool:
    return ipaddress.ip_address(address).is_loopback


def cluster_test(test: Callable) -> Callable:
    """Marked ``cluster``, and skipped with the reason where no namespace can be made."""
    return pytest.mark.cluster(pytest.mark.skipif(not AVAILABLE, reason=REASON or "namespace available")(test))


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory) -> dict[str, Any]:
    """One run of the placement scenario, for the placement and the address tests."""
    return scenario("two-nodes", tmp_path_factory.mktemp("ray"))


@cluster_test
def test_actors_of_one_cpu_each_land_on_different_nodes(two_nodes):
    nodes = [actor["node"] for actor in two_nodes["actors"]]
    assert sorted(nodes) == ["b", "head"]
    assert {actor["ip"] for actor in two_nodes["actors"]} == {"127.0.0.1"}


@cluster_test
def test_every_address_is_loopback(two_nodes):
    assert two_nodes["node_addresses"] == {"head": "127.0.0.1", "b": "127.0.0.1"}
    assert two_nodes["gcs_address"].startswith("127.0.0.1:")
    assert two_nodes["interfaces"] == ["lo"]
    assert two_nodes["sockets"], "no socket seen: the check looked at nothing"
    assert all(loopback(address) for address in two_nodes["sockets"]), two_nodes["sockets"]


@cluster_test
def test_a_detached_actor_outlives_its_driver(tmp_path):
    result = scenario("detached", tmp_path)
    made, found = result["creator"]["registry"], result["finder"]["registry"]
    assert made["node_id"] == result["node_b_id"]  # placed by its resource on node b
    assert found["node_id"] == made["node_id"] and found["pid"] == made["pid"]  # the same actor, not a new one
    assert (made["calls"], found["calls"]) == (1, 2)  # its state too
    # The control: a named actor that is not detached went with its driver.
    assert result["finder"]["plain_gone_s"] is not None
    assert result["creator"]["plain"]["node_id"] == result["node_b_id"]


@cluster_test
def test_a_lost_nodes_actor_comes_back_on_the_survivor(tmp_path):
    result = scenario("node-loss", tmp_path)
    before, after = result["before"], result["after"]
    assert before["node"] == "b"
    assert after["node"] == "head" and after["restarted"] and after["calls"] == 1  # a new incarnation elsewhere
    assert after["pid"] != before["pid"]
    assert result["noticed_s"] < NOTICED_WITHIN_S
    assert result["back_s"] < BACK_WITHIN_S
    assert result["bystander_calls"] > 0
    assert result["bystander_max_wait_s"] < BYSTANDER_WAIT_S


def test_scenarios_refuse_to_run_outside_a_namespace(tmp_path):
    if [name for _, name in socket.if_nameindex()] == ["lo"]:
        pytest.skip("this machine has only loopback: inside and outside look the same")
    proc = subprocess.run([sys.executable, "-m", "testing.ray_scenarios", "two-nodes", "--out", str(tmp_path / "x")],
                          cwd=netns.ROOT, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 2 and "namespace" in proc.stderr
    assert not (tmp_path / "x").exists()


def test_the_pinned_ray_is_the_one_installed():
    """The cluster extra and the test extra pin one Ray, and the tests run with it."""
    import ray

    project = tomllib.loads((netns.ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    pins = {r for r in project["cluster"] + project["test"] if r.startswith("ray")}
    assert pins == {f"ray=={ray.__version__}"}


def test_the_service_does_not_import_ray():
    """Without --ray-address nothing changes: the API process's modules (the command line and the app it serves,
    which bring every module of a stream) must not pull Ray in, whose import costs 0.6-2 s here."""
    code = "import sys, server.cli, server.api.app; print('ray' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], cwd=netns.ROOT, capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "False", proc.stderr[-2000:]
