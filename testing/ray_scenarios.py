"""Scenarios on a real two-node Ray cluster (head "head" with resource ``node_a``, worker "b" with ``node_b``, one
CPU each), for ``tests/test_ray_cluster.py`` and ``bench/ray_cluster.py``. Each runs in a namespace of its own and
writes what it saw as JSON; the caller judges it:

    testing.netns.run_module("testing.ray_scenarios", "node-loss", "--out", "/tmp/result.json", timeout_s=120)

Scenarios: ``two-nodes`` (placement by resources, every address on loopback), ``detached`` (a detached named actor
outlives the driver that made it; another driver finds it), ``node-loss`` (node b killed: its actor comes back on
the head while an actor there keeps answering). Every result also holds the cluster's start and stop times and the
processes left in the namespace after the cluster stopped (there must be none).
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from testing import netns
from testing.ray_actors import Probe
from testing.ray_cluster import NAMESPACE, NODE_LABEL, RayCluster

MODULE = "testing.ray_scenarios"  # what ``python -m`` runs (``__name__`` is "__main__" there)
CALL_TIMEOUT_S = 60.0  # one actor call on a live cluster; far above what it takes, so only a fault reaches it
BACK_TIMEOUT_S = 60.0  # from a node's loss until its actor has answered again: the bound


@contextlib.contextmanager
def cluster_of_two(result: dict[str, Any]) -> Iterator[RayCluster]:
    """The cluster of every scenario; its start and stop times go into ``result``."""
    start = time.monotonic()
    with RayCluster(head_resources={"node_a": 1}) as cluster:
        result["head_start_s"] = round(time.monotonic() - start, 2)
        start = time.monotonic()
        cluster.add_node("b", resources={"node_b": 1})
        result["node_start_s"] = round(time.monotonic() - start, 2)
        yield cluster
        start = time.monotonic()
    result["shutdown_s"] = round(time.monotonic() - start, 2)


def node_names() -> dict[str, str]:
    """Ray's node id -> the node's name in the harness, for every node ever seen."""
    return {n["NodeID"]: n.get("Labels", {}).get(NODE_LABEL, "") for n in ray.nodes()}


def two_nodes() -> dict[str, Any]:
    """Two actors of one CPU each on two nodes of one CPU each: Ray must put them on different nodes. Then every
    address the cluster reports or uses, and every socket open in the namespace."""
    result: dict[str, Any] = {}
    with cluster_of_two(result) as cluster:
        actors = [Probe.options(num_cpus=1).remote() for _ in range(2)]
        seen = ray.get([a.where.remote() for a in actors], timeout=CALL_TIMEOUT_S)
        names = node_names()
        result["actors"] = [{**s, "node": names[s["node_id"]]} for s in seen]
        result["node_addresses"] = {names[n["NodeID"]]: n["NodeManagerAddress"] for n in ray.nodes()}
        result["gcs_address"] = cluster.address
        result["interfaces"] = [name for _, name in socket.if_nameindex()]
        result["sockets"] = inet_sockets()
    return result


def inet_sockets() -> list[str]:
    """The address of every TCP/UDP endpoint open in the namespace, local and remote (IPv4 ones that an IPv6 socket
    carries as ``::ffff:a.b.c.d`` written as IPv4)."""
    addresses = set()
    for conn in psutil.net_connections(kind="inet"):
        for end in (conn.laddr, conn.raddr):
            if end:
                ip = ipaddress.ip_address(end.ip)
                addresses.add(str(getattr(ip, "ipv4_mapped", None) or ip))
    return sorted(addresses)


def detached() -> dict[str, Any]:
    """One driver process makes a detached named actor on node b (and a plain named one) and exits; a second driver
    process finds the detached one by name, with its state, once the plain one is gone with its driver."""
    result: dict[str, Any] = {}
    with cluster_of_two(result) as cluster:
        result["creator"] = driver("create-detached", cluster)
        result["finder"] = driver("find-detached", cluster)
        result["node_b_id"] = cluster.nodes["b"].node_id
    return result


def driver(step: str, cluster: RayCluster) -> dict[str, Any]:
    """Run a driver step (this module's subcommand) as a process of its own; what it wrote."""
    out = cluster.temp_dir / f"driver-{step}.json"
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", MODULE, step, "--address", cluster.address, "--out", str(out)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"driver {step} exited with {proc.returncode}: {proc.stderr[-3000:]}")
    seen = json.loads(out.read_text())
    return {**seen, "wall_s": round(time.monotonic() - start, 2)}


def create_detached(address: str) -> dict[str, Any]:
    ray.init(address=address, namespace=NAMESPACE, log_to_driver=False, logging_level="ERROR")
    registry = Probe.options(name="registry", lifetime="detached", num_cpus=0, resources={"node_b": 0.1}).remote()
    plain = Probe.options(name="plain", num_cpus=0, resources={"node_b": 0.1}).remote()
    seen = ray.get([registry.where.remote(), plain.where.remote()], timeout=CALL_TIMEOUT_S)
    return {"registry": seen[0], "plain": seen[1]}


def find_detached(address: str) -> dict[str, Any]:
    ray.init(address=address, namespace=NAMESPACE, log_to_driver=False, logging_level="ERROR")
    start = time.monotonic()
    plain_gone_s = None
    while time.monotonic() - start < 30:
        try:
            ray.get_actor("plain")
        except ValueError:
            plain_gone_s = round(time.monotonic() - start, 2)
            break
        time.sleep(0.1)
    registry = ray.get(ray.get_actor("registry").where.remote(), timeout=CALL_TIMEOUT_S)
    return {"registry": registry, "plain_gone_s": plain_gone_s}


def node_loss() -> dict[str, Any]:
    """A detached actor (restarts and task retries without limit) runs on node b, preferred but not required; an
    actor on the head is called every 0.1 s throughout. Node b is killed: when does Ray notice, when does the actor
    answer again and where, and what was the longest wait for an answer on the head meanwhile."""
    result: dict[str, Any] = {}
    with cluster_of_two(result) as cluster:
        b = cluster.nodes["b"].node_id
        stream = Probe.options(name="stream", lifetime="detached", num_cpus=1, max_restarts=-1, max_task_retries=-1,
                               scheduling_strategy=NodeAffinitySchedulingStrategy(b, soft=True)).remote()  # fmt: skip
        result["before"] = ray.get(stream.where.remote(), timeout=CALL_TIMEOUT_S)
        bystander = Probe.options(num_cpus=0, resources={"node_a": 0.1}).remote()
        ray.get(bystander.where.remote(), timeout=CALL_TIMEOUT_S)
        with Pinger(lambda: ray.get(bystander.where.remote(), timeout=CALL_TIMEOUT_S)) as pinger:
            killed = time.monotonic()
            cluster.kill_node("b")
            answer = stream.where.remote()
            cluster.wait_dead(b, timeout_s=BACK_TIMEOUT_S)
            result["noticed_s"] = round(time.monotonic() - killed, 2)
            result["after"] = ray.get(answer, timeout=max(1.0, BACK_TIMEOUT_S - (time.monotonic() - killed)))
            result["back_s"] = round(time.monotonic() - killed, 2)
        result["bystander_max_wait_s"] = round(pinger.max_wait_s, 2)
        result["bystander_calls"] = pinger.calls
        names = node_names()
        for key in ("before", "after"):
            result[key]["node"] = names[result[key]["node_id"]]
        ray.kill(stream)
    return result


class Pinger(threading.Thread):
    """Calls ``call`` back to back (0.1 s apart) until stopped; the longest time between two answers."""

    def __init__(self, call: Callable[[], object]) -> None:
        super().__init__(daemon=True)
        self.call = call
        self.stopping = threading.Event()
        self.max_wait_s = 0.0
        self.calls = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        last = time.monotonic()
        try:
            while not self.stopping.is_set():
                self.call()
                now = time.monotonic()
                self.max_wait_s, last = max(self.max_wait_s, now - last), now
                self.calls += 1
                self.stopping.wait(0.1)
        except BaseException as e:  # noqa: BLE001 - handed to the thread that joins
            self.error = e

    def __enter__(self) -> Pinger:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.join(CALL_TIMEOUT_S + 5)
        if self.error is not None:
            raise RuntimeError("the bystander stopped answering") from self.error


def leftovers() -> list[str]:
    """Processes in this PID namespace besides its first (the shell of ``testing.netns``) and this one."""
    left = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        if p.info["pid"] not in (1, os.getpid()):
            left.append(f"{p.info['pid']}: {' '.join(p.info['cmdline'] or [])[:200]}")
    return left


SCENARIOS: dict[str, Callable[[], dict[str, Any]]] = {
    "two-nodes": two_nodes,
    "detached": detached,
    "node-loss": node_loss,
}
DRIVER_STEPS: dict[str, Callable[[str], dict[str, Any]]] = {
    "create-detached": create_detached,
    "find-detached": find_detached,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("name", choices=[*SCENARIOS, *DRIVER_STEPS])
    parser.add_argument("--out", type=Path, required=True, help="the JSON result")
    parser.add_argument("--address", help="the cluster (driver steps only)")
    args = parser.parse_args(argv)
    if not netns.inside():
        parser.error("run it in a namespace of its own (testing.netns.run_module): Ray would leave loopback here")
    if args.name in DRIVER_STEPS:
        result = DRIVER_STEPS[args.name](args.address)
    else:
        start = time.monotonic()
        result = SCENARIOS[args.name]()
        result["total_s"] = round(time.monotonic() - start, 2)
        result["leftover_processes"] = leftovers()
    args.out.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
