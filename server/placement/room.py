"""Whether a stream whose node was lost waits for room on the cluster, and how to say so.

Ray starts a lost stream's actor again on a node with room for what it asks (``--ray-stream-cpus`` CPUs and, on a
cluster with GPUs, ``--ray-stream-gpus`` of one). Where no node has room, the actor waits, and Ray's scheduler holds
its request as a pending demand of that shape (``ray status`` lists it). The demand is the sign, not the free
resources: a node that has just taken the actor shows them used while the actor is still starting there.

Why words: "it resumes on another node" is true only once some node has room; until then the stream says what it
needs and what the cluster has free, so that whoever runs it knows to add a node or stop a stream.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from .. import errors

log = logging.getLogger(__name__)
STATUS_TIMEOUT_S = 2  # how long the API process waits for Ray's scheduler to say what it holds
KINDS = (("CPU", "CPU"), ("GPU", "GPU"))  # Ray's resource, and its name in words


def needs(cpus: float, gpus: float) -> dict[str, float]:
    """What a stream's actor asks of a node, as Ray names the resources (a GPU share only when it asks one)."""
    return {"CPU": float(cpus), **({"GPU": float(gpus)} if gpus > 0 else {})}


def waiting_for_room(needs: Mapping[str, float], status: Any) -> dict[str, str] | None:
    """The stream's error while Ray holds a request of its shape that no node has room for (``status``: Ray's
    ``ClusterStatus``); None when no such request is pending (the actor is being started somewhere)."""
    if not any(_same(bundle, needs) for bundle in _pending(status)):
        return None
    free = [_free(node) for node in [*status.active_nodes, *status.idle_nodes]]
    total = {kind: sum(f.get(kind, 0.0) for f in free) for kind, _ in KINDS}
    most = {kind: max((f.get(kind, 0.0) for f in free), default=0.0) for kind, _ in KINDS}
    asked = " and ".join(_amount(needs.get(kind, 0.0), word) for kind, word in KINDS if needs.get(kind, 0.0) > 0)
    has = "; ".join(f"{_amount(total[kind], word)} free, at most {_number(most[kind])} on one node"
                    for kind, word in KINDS if kind in needs)  # fmt: skip
    message = (f"the node running this stream was lost and no node has room for it: it needs {asked} on one node; "
               f"the cluster has {has} ({len(free)} nodes). It waits, and resumes from its last checkpoint once a "
               "node has room: add a node, or stop another stream")  # fmt: skip
    return {"code": errors.WAITING_FOR_ROOM, "message": message}


def cluster_status() -> Any | None:
    """Ray's scheduler's view of the cluster (what the nodes hold, what waits); None when it does not answer."""
    try:
        import ray
        from ray.autoscaler.v2.sdk import get_cluster_status

        return get_cluster_status(ray.get_runtime_context().gcs_address, timeout=STATUS_TIMEOUT_S)
    except Exception as exc:  # an older or busy GCS: the stream keeps saying it resumes elsewhere
        log.info("Ray's cluster status is not available (%s)", type(exc).__name__)
        return None


def _pending(status: Any) -> Iterable[Mapping[str, float]]:
    for demand in status.resource_demands.ray_task_actor_demand:
        for request in demand.bundles_by_count:
            yield request.bundle


def _same(bundle: Mapping[str, float], needs: Mapping[str, float]) -> bool:
    return all(abs(bundle.get(kind, 0.0) - needs.get(kind, 0.0)) < 1e-6 for kind, _ in KINDS)


def _free(node: Any) -> dict[str, float]:
    usage = node.resource_usage.usage if node.resource_usage is not None else []
    return {u.resource_name: max(0.0, u.total - u.used) for u in usage}


def _number(x: float) -> str:
    return f"{x:g}"


def _amount(x: float, word: str) -> str:
    return f"{_number(x)} {word}" + ("" if x == 1 else "s")
