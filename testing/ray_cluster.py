"""A real multi-node Ray cluster on 127.0.0.1: one ``ray start --block`` process per node, head and workers.

For code that already runs in a namespace of its own (``testing.netns``): only there does every node advertise
127.0.0.1. Why ``ray start`` subprocesses and not ``ray.cluster_utils.Cluster``: it is the command a cluster of VMs
runs, each node is one process tree that can be killed whole (a node lost, as a machine that dies), the owner needs
only Ray's CLI and public API, and nothing is written outside the cluster's temp dir (``Cluster`` writes
``/tmp/ray/ray_current_cluster``, which every ``ray.init()`` on the machine reads). ``Cluster`` starts a node about
0.7 s sooner here (no CLI to import): 5.0 + 2.2 s against 5.5 + 2.9 s for head + worker, 3 runs each.

The owning process is connected to the cluster as a driver (``ray.init``): that is how it sees nodes join and die.
Every wait is bounded; :meth:`RayCluster.shutdown` leaves no process of the cluster behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import ray

from testing.net import HOST, free_port
from testing.poll import until
from testing.processes import outlived, shared_memory

RAY = str(Path(sys.executable).with_name("ray"))
NAMESPACE = "overtime-test"
NODE_LABEL = "overtime-test-node"  # every node carries its name under this label
# A killed raylet fails each health check at once: with these the GCS declares it dead after about 2.3 s (17 s with
# Ray's defaults, measured here). A live raylet is declared dead only when 5 checks in a row time out after 1 s
# each: a stall of about 5 s.
FAST_FAILURE_DETECTION: dict[str, Any] = {
    "health_check_initial_delay_ms": 0,
    "health_check_period_ms": 500,
    "health_check_timeout_ms": 1000,
    "health_check_failure_threshold": 5,
}
# On SIGTERM ``ray start`` drains its node for up to 30 s while an actor lives there (Ray 2.60; meant for Serve on
# Kubernetes): a test cluster stops at once instead.
ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"}
STARTED = "Ray runtime started."


@dataclass
class Node:
    """One node: its ``ray start --block`` process, parent of every process of the node (raylet, agents,
    workers); ``node_id`` is Ray's, known once the node has joined."""

    name: str
    proc: subprocess.Popen
    log: Path
    node_id: str = ""

    def processes(self) -> list[psutil.Process]:
        try:
            root = psutil.Process(self.proc.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []


class RayCluster:
    """``with RayCluster() as cluster: cluster.add_node("b", resources={"node_b": 1}); cluster.kill_node("b")``

    The head node starts with the cluster (``head_cpus``, ``head_resources``); each node has ``object_store_mb`` of
    object store and the label ``NODE_LABEL=<name>``. ``system_config`` goes to the head, which hands it to all."""

    def __init__(
        self,
        temp_dir: Path | None = None,
        *,
        head_cpus: int = 1,
        head_resources: Mapping[str, float] | None = None,
        object_store_mb: int = 100,
        system_config: Mapping[str, Any] = FAST_FAILURE_DETECTION,
        namespace: str = NAMESPACE,
    ) -> None:
        # Ray's unix sockets live under the temp dir and their paths must stay under 107 bytes: short, under /tmp.
        self._own_temp = temp_dir is None
        self.temp_dir = Path(temp_dir or tempfile.mkdtemp(prefix="ray", dir="/tmp"))
        self.port = free_port()
        self.address = f"{HOST}:{self.port}"
        self.object_store_mb = object_store_mb
        self.namespace = namespace
        self.nodes: dict[str, Node] = {}
        self._head_args = ["--head", "--port", str(self.port), "--temp-dir", str(self.temp_dir),
                           "--include-dashboard=false", "--system-config", json.dumps(dict(system_config))]  # fmt: skip
        self._head_cpus = head_cpus
        self._head_resources = dict(head_resources or {})

    def start(self, timeout_s: float = 60.0) -> RayCluster:
        """The head node up and this process connected to it as a driver."""
        self._start_node("head", self._head_args, self._head_cpus, self._head_resources, {}, timeout_s)
        ray.init(address=self.address, namespace=self.namespace, log_to_driver=False, logging_level="ERROR")
        self._wait_joined(self.nodes["head"], timeout_s)
        return self

    def add_node(
        self,
        name: str,
        num_cpus: int = 1,
        resources: Mapping[str, float] | None = None,
        labels: Mapping[str, str] | None = None,
        timeout_s: float = 60.0,
    ) -> Node:
        """A worker node joined to the cluster (alive in ``ray.nodes()``) before this returns."""
        if name in self.nodes:
            raise ValueError(f"a node named {name!r} exists already")
        node = self._start_node(name, ["--address", self.address], num_cpus, resources or {}, labels or {}, timeout_s)
        self._wait_joined(node, timeout_s)
        return node

    def _start_node(
        self,
        name: str,
        role: list[str],
        num_cpus: int,
        resources: Mapping[str, float],
        labels: Mapping[str, str],
        timeout_s: float,
    ) -> Node:
        # Several nodes share one address: every port a node opens is picked by the OS, never a fixed default
        # (the agent's 52365 would collide), and workers bind port 0.
        labels = {**labels, NODE_LABEL: name}
        cmd = [RAY, "start", *role, "--block", "--node-ip-address", HOST, "--num-cpus", str(num_cpus),
               "--object-store-memory", str(self.object_store_mb * 1024 * 1024), "--resources", json.dumps(resources),
               "--labels", ",".join(f"{k}={v}" for k, v in labels.items()), "--disable-usage-stats",
               "--include-log-monitor=false", "--min-worker-port", "0", "--max-worker-port", "0",
               "--dashboard-agent-listen-port", str(free_port())]  # fmt: skip
        log = self.temp_dir / f"node-{name}.log"
        # Each node's processes keep their temporary files in a folder of the node's own, as on a machine of its own:
        # what a lost node leaves there goes with the cluster, not into the machine's /tmp.
        tmp = self.temp_dir / f"tmp-{name}"
        tmp.mkdir(exist_ok=True)
        with open(log, "ab") as out:
            env = {**os.environ, **ENV, "TMPDIR": str(tmp)}
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        node = self.nodes[name] = Node(name, proc, log)
        until(lambda: self._started(node), timeout_s, f"ray start of node {name!r}", 0.1)
        return node

    @staticmethod
    def _started(node: Node) -> bool:
        text = node.log.read_text(errors="replace")
        if node.proc.poll() is not None:
            raise RuntimeError(f"ray start of node {node.name!r} exited with {node.proc.returncode}: {text[-3000:]}")
        return STARTED in text

    def _wait_joined(self, node: Node, timeout_s: float) -> None:
        info = until(lambda: self.node_info(node.name), timeout_s, f"node {node.name!r} alive in the cluster", 0.1)
        node.node_id = info["NodeID"]

    def node_info(self, name: str) -> dict[str, Any] | None:
        """Ray's newest record of the node called ``name`` while it is alive (``ray.nodes()``), else None."""
        for info in ray.nodes():
            if info["Alive"] and info.get("Labels", {}).get(NODE_LABEL) == name:
                return info
        return None

    def kill_node(self, name: str) -> None:
        """The node lost at once: SIGKILL to every process of it, as when its machine dies, and with them the
        shared memory only they had mapped (a machine's /dev/shm goes with it; here the nodes share this machine's,
        where a killed process's frame rings and semaphores would stay). The GCS notices on its own
        (:data:`FAST_FAILURE_DETECTION`)."""
        node = self.nodes.pop(name)
        processes = node.processes()
        mapped = shared_memory(processes)
        survivors = _kill(processes, signal.SIGKILL, timeout_s=10.0)
        node.proc.wait(10)
        if survivors:
            raise TimeoutError(f"node {name!r}: processes outlived SIGKILL: {survivors}")
        for path in mapped - self.shared_memory():
            path.unlink(missing_ok=True)

    def shared_memory(self) -> set[Path]:
        """The /dev/shm entries the cluster's processes have mapped now (what must be gone after :meth:`shutdown`)."""
        return shared_memory(p for node in self.nodes.values() for p in node.processes())

    def shutdown(self, timeout_s: float = 30.0) -> None:
        """Workers first, while the head still answers them, then the head: SIGTERM to each ``ray start`` (it stops
        its node), SIGKILL to whatever of the node is still there after ``timeout_s``. The temp dir goes too when the
        cluster made it. TimeoutError, after every node was tried, if some process outlived SIGKILL."""
        if ray.is_initialized():
            ray.shutdown()
        survivors = []
        for name in sorted(self.nodes, key=lambda n: n == "head"):
            node = self.nodes.pop(name)
            tree = node.processes()
            with contextlib.suppress(ProcessLookupError):
                node.proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.proc.wait(timeout_s)
            survivors += _kill(tree, signal.SIGKILL, timeout_s=10.0)
            node.proc.wait(10)
        if self._own_temp:
            shutil.rmtree(self.temp_dir, ignore_errors=True)
        if survivors:
            raise TimeoutError(f"processes of the cluster outlived SIGKILL: {survivors}")

    def __enter__(self) -> RayCluster:
        try:
            return self.start()
        except BaseException:
            self.shutdown()
            raise

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def _kill(processes: list[psutil.Process], sig: signal.Signals, timeout_s: float) -> list[int]:
    """Send ``sig`` to each process still running and wait for them all; the pids of those still there after
    ``timeout_s``."""
    for p in processes:
        with contextlib.suppress(psutil.Error):
            p.send_signal(sig)
    return [p.pid for p in outlived(processes, timeout_s)]
