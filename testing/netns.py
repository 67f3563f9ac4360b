"""Run a command in a network namespace of its own, with loopback as its only interface.

Why: Ray advertises the machine's interface address even when told ``--node-ip-address 127.0.0.1``, and probes a
public DNS address to find it; in a namespace that has nothing but ``lo`` every node, driver and client is on
127.0.0.1 and no packet can leave the machine. The command also gets a PID namespace (and a /proc of its own): its
first process is a shell that reaps orphans, and when the command ends, or ``unshare`` is killed on a timeout, the
kernel kills every process left in it. So nothing a scenario starts (raylets, workers, servers) can outlive it.

Python 3.11 has no ``os.unshare``: the command is re-executed under ``unshare(1)``, which needs root.
"""

from __future__ import annotations

import functools
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# --kill-child: if unshare dies (a timeout kills it), the namespace's first process gets SIGKILL, and with it the
# whole PID namespace. The shell stays the first process (no exec) so that orphans are reaped, not left as zombies.
UNSHARE = ["unshare", "--net", "--pid", "--fork", "--mount-proc", "--kill-child"]
SETUP = 'ip link set lo up && "$@"'


def wrap(argv: Sequence[str]) -> list[str]:
    """``argv`` as a command line that runs it inside a fresh namespace with loopback up."""
    return [*UNSHARE, "sh", "-c", SETUP, "sh", *argv]


@functools.cache
def namespace_available() -> tuple[bool, str]:
    """Whether a namespace can be made here, and why not when it cannot (root, ``unshare`` and ``ip`` needed)."""
    if os.geteuid() != 0:
        return False, "network namespaces need root (unshare --net)"
    for tool, package in (("unshare", "util-linux"), ("ip", "iproute2")):
        if shutil.which(tool) is None:
            return False, f"no {tool} command (Debian's {package})"
    try:
        probe = subprocess.run(wrap(["ip", "-o", "addr"]), capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return False, "unshare did not answer within 20 s"
    if probe.returncode != 0:
        return False, f"unshare --net failed: {probe.stderr.strip()[-300:]}"
    return True, ""


def inside() -> bool:
    """Whether this process runs where loopback is the only interface (in a namespace made by :func:`run`)."""
    return [name for _, name in socket.if_nameindex()] == ["lo"]


def run(
    argv: Sequence[str],
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    cwd: Path = ROOT,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` in a fresh namespace; its output captured as text. On a timeout everything in the namespace is
    killed and ``subprocess.TimeoutExpired`` raised. ``env`` is added to this process's environment."""
    return subprocess.run(
        wrap(argv),
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def run_module(
    module: str,
    *args: str,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``python -m module args`` (this interpreter) in a fresh namespace, the repository root first on PYTHONPATH so
    that every process started there (a Ray worker too) imports the repository's modules."""
    env = dict(env or {})
    path = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", os.environ.get("PYTHONPATH", ""))) if p)
    return run([sys.executable, "-m", module, *args], timeout_s, {**env, "PYTHONPATH": path})
