"""A cluster with no room for a lost node's stream, for ``tests/test_cluster.py``: run inside a network namespace of
its own (``testing.netns``), as ``bench.cluster`` runs its scenario.

A head without CPUs and one worker node of 1 CPU; a real ``overtime serve --ray-address`` whose streams ask 1 CPU.
The stream learns on the worker node; the node is lost (every process of it killed), and no node is left with room:
the stream must say it waits for room (what it needs, what the cluster has free) and ``/metrics`` count it. Then a
node of 1 CPU joins: the stream runs there again from its checkpoint and the count goes back to 0.

    python -m cluster_support --inside OUT.json      # (tests/ on PYTHONPATH) inside a namespace; writes the result
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from testing import netns
from testing.media import make_video
from testing.server import ServerProcess

STREAM = {"source": "file:clip.mp4", "loop": True, "fps": 10, "width": 64, "height": 64, "name": "roomless"}
WAIT_S = 90.0  # for each step: learning, waiting for room, running again


def room_scenario(scratch: Path) -> dict:
    from testing.ray_cluster import RayCluster

    make_video(scratch / "media" / "clip.mp4", frames=60, size=128, fps=15)
    result: dict = {}
    with RayCluster(head_cpus=0) as cluster:
        cluster.add_node("a", num_cpus=1)
        flags = ["--no-demo-stream", "--checkpoint-interval-s", "2", "--ray-address", cluster.address,
                 "--ray-stream-cpus", "1"]  # fmt: skip
        with ServerProcess(scratch, *flags) as srv:
            sid = srv.client.post("/api/streams", json=STREAM).json()["id"]
            first = srv.wait_for(sid, _learning(10), WAIT_S, "running and learning on node a")
            srv.wait_for(sid, lambda s: (s["checkpoint_frames"] or 0) > 0, WAIT_S, "a checkpoint written")
            result["before"] = {"waiting": srv.metrics().require("overtime_streams_waiting_for_room")}
            cluster.kill_node("a")
            waiting = srv.wait_for(sid, _waiting_for_room, WAIT_S, "waiting for room")
            scrape = srv.metrics()
            result["lost"] = {"state": waiting["state"], "error": waiting["error"],
                              "waiting": scrape.require("overtime_streams_waiting_for_room"),
                              "reconnecting": scrape.require("overtime_streams", state="reconnecting")}  # fmt: skip
            cluster.add_node("b", num_cpus=1)
            back = srv.wait_for(sid, _learning(5, unlike=first["node"]), WAIT_S, "running again on node b")
            result["room"] = {"state": back["state"], "error": back["error"], "resumed_from": back["resumed_from"],
                              "moved": back["node"] != first["node"],
                              "waiting": srv.metrics().require("overtime_streams_waiting_for_room")}  # fmt: skip
            srv.client.delete(f"/api/streams/{sid}")  # before the cluster stops: its frame rings go with it
    return result


def _learning(frames: int, unlike: str | None = None):
    def check(info: dict) -> bool:
        moved = unlike is None or info["node"] != unlike
        return moved and info["state"] == "running" and info["counters"]["processed"] >= frames

    return check


def _waiting_for_room(info: dict) -> bool:
    return info["state"] == "reconnecting" and (info["error"] or {}).get("code") == "waiting_for_room"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--inside", type=Path, required=True, help="run the scenario here, its result to this file")
    args = p.parse_args(argv)
    if not netns.inside():
        print("cluster_support: runs only in a network namespace with loopback alone", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="overtime-room-") as scratch:
        args.inside.write_text(json.dumps(room_scenario(Path(scratch))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
