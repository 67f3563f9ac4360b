"""The actor the cluster scenarios place, move and look up. A module of its own because Ray's workers import it by
name (a class in ``__main__`` would travel by value and hide import problems the service will have)."""

from __future__ import annotations

import os
from typing import Any

import ray


@ray.remote
class Probe:
    """Tells where it runs, how often it was called since it (re)started, and whether Ray restarted it."""

    def __init__(self) -> None:
        self.calls = 0

    def where(self) -> dict[str, Any]:
        self.calls += 1
        context = ray.get_runtime_context()
        return {
            "node_id": context.get_node_id(),
            "ip": ray.util.get_node_ip_address(),
            "pid": os.getpid(),
            "calls": self.calls,
            "restarted": context.was_current_actor_reconstructed,
        }
