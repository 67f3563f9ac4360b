"""testing.netns: what the cluster tests rely on. Inside, loopback is the only interface and it is up; nothing
started inside outlives the command, not even on a timeout (the cluster tests leave no raylet behind on any path)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time

import psutil
import pytest

from testing import netns

pytestmark = pytest.mark.realtime

AVAILABLE, REASON = netns.namespace_available()
needs_namespace = pytest.mark.skipif(not AVAILABLE, reason=REASON or "namespace available")


def marker() -> str:
    """A ``sleep`` duration no other process on the machine has on its command line."""
    return f"299.{random.randrange(10**8, 10**9)}"


def running(duration: str) -> list[psutil.Process]:
    """The machine's ``sleep <duration>`` processes."""
    return [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", duration]]


@needs_namespace
def test_only_loopback_inside_and_it_is_up():
    proc = netns.run(["ip", "-o", "addr"], timeout_s=20)
    assert proc.returncode == 0, proc.stderr
    names = {line.split()[1] for line in proc.stdout.splitlines()}
    assert names == {"lo"}
    assert "inet 127.0.0.1/8" in proc.stdout


@needs_namespace
def test_inside_says_so_in_a_namespace():
    code = "from testing import netns; raise SystemExit(0 if netns.inside() else 1)"
    assert netns.run([sys.executable, "-c", code], timeout_s=20, env={"PYTHONPATH": str(netns.ROOT)}).returncode == 0


@needs_namespace
def test_nothing_started_inside_outlives_the_command():
    duration = marker()
    proc = netns.run(["sh", "-c", f"(sleep {duration} &); echo started"], timeout_s=20)  # an orphan, not waited for
    assert proc.stdout.strip() == "started"
    time.sleep(0.2)
    assert running(duration) == []


@needs_namespace
def test_a_timeout_kills_everything_inside():
    duration = marker()
    start = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        netns.run(["sh", "-c", f"(sleep {duration} &); sleep {duration}"], timeout_s=2)
    assert time.monotonic() - start < 10
    time.sleep(0.2)
    assert running(duration) == []


def test_not_root_is_a_reason(monkeypatch):
    netns.namespace_available.cache_clear()
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    try:
        assert netns.namespace_available() == (False, "network namespaces need root (unshare --net)")
    finally:
        netns.namespace_available.cache_clear()
