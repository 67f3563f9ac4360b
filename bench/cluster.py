"""The service on a Ray cluster, on this machine: a head and two worker nodes (separate raylets) in a network namespace
of their own (loopback only), and a real ``overtime serve --ray-address``. Writes ``bench/results/cluster.{md,json}``.

1. **Placement**: two streams started one after the other; the nodes they run on.
2. **A node lost**: the first stream's node killed (every process of it, as when a machine dies); how long until that
   stream runs again on the other node with its weights (``resumed_from`` > 0); the other stream's viewer's longest
   wait for a frame meanwhile; the API's answers to a request every 0.25 s meanwhile.
3. **The API restarted**: its process killed and started again; every stream listed and viewable, none restarted
   (the same processes, their counters going on).
4. **A stream deleted**: the second one; its actor ends as a process should: gone from Ray and the list, every
   process of it gone, and its temporary folder removed (its exit handlers ran; a killed actor would leave it on its
   node).
5. **No room**: the survivor lost too, with the first stream on it: no node is left with room, and the stream must
   say it waits for room (what it needs, what the cluster has free) and ``/metrics`` count it; then a node of 1 CPU
   joins, the stream runs there from its checkpoint and the count is back to 0. In the same cluster as parts 1-4, not
   a second one: a cluster and a server started again cost the suite about 40 s.
6. **A node added**: a node joins; the next stream runs on it (the one of part 5 is full).
7. **Frame rate**: one stream at a fixed learning size and a rate it cannot hold (so the learner sets the pace),
   through a single-machine server and then through the cluster, one after the other: frames learned per second.

    python -m bench.cluster                           # re-runs itself in a namespace of its own (root needed)
    python -m bench.cluster --quick --out-dir DIR     # the suite's run: parts 1-5, shorter (cluster-quick.*)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import websockets

from bench.cluster_report import GAP_LIMIT_S, RECOVERY_LIMIT_S, markdown
from testing import netns
from testing.media import make_video
from testing.poll import until
from testing.processes import fork_server_folder, outlived
from testing.report import RESULTS, Run
from testing.server import ServerProcess

ROOM_WAIT_S = 90.0  # part 5, for each step: a checkpoint, waiting for room, running again
STREAM = {"source": "file:clip.mp4", "loop": True, "fps": 10, "width": 64, "height": 64}
RATE_STREAM = {"source": "file:clip.mp4", "loop": True, "fps": 30, "width": 128, "height": 96}


def server(work: Path, ray_address: str | None) -> ServerProcess:
    flags = ["--no-demo-stream", "--checkpoint-interval-s", "2"]
    if ray_address:
        flags += ["--ray-address", ray_address, "--ray-stream-cpus", "1"]
    return ServerProcess(work, *flags)


def running(srv: ServerProcess, sid: str, frames: int, timeout_s: float, unlike: str | None = None) -> dict:
    """The stream's info once it runs and has learned ``frames`` more frames; or, with ``unlike``, once it runs on
    another node and has learned ``frames`` there (a stream started again on another node counts afresh)."""
    start = 0 if unlike else srv.stream(sid)["counters"]["processed"]

    def ready(info: dict) -> bool:
        moved = unlike is None or info["node"] != unlike
        return moved and info["state"] == "running" and info["counters"]["processed"] >= start + frames

    return srv.wait_for(sid, ready, timeout_s, "running and learning")


class Watch:
    """A thread that records when frames of one stream reach a WebSocket viewer."""

    def __init__(self, srv: ServerProcess, sid: str) -> None:
        self.url, self.arrivals, self._stop = srv.ws(f"/ws/streams/{sid}"), [], threading.Event()
        self._thread = threading.Thread(target=asyncio.run, args=(self._watch(),), daemon=True)
        self._thread.start()

    async def _watch(self) -> None:
        async with websockets.connect(self.url, max_size=2**22) as ws:
            while not self._stop.is_set():
                try:
                    message = await asyncio.wait_for(ws.recv(), 1.0)
                except TimeoutError:
                    continue
                if isinstance(message, str) and json.loads(message).get("type") == "frame":
                    self.arrivals.append(time.monotonic())

    def stop(self) -> float:
        """The longest wait between two frames."""
        self._stop.set()
        self._thread.join(10)
        return max((b - a for a, b in zip(self.arrivals, self.arrivals[1:], strict=False)), default=float("inf"))


class Poll:
    """A thread that asks the API for its streams every 0.25 s and counts what went unanswered."""

    def __init__(self, srv: ServerProcess) -> None:
        self.srv, self.asked, self.failed, self.slowest_s = srv, 0, 0, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.wait(0.25):
            start = time.monotonic()
            self.asked += 1
            try:
                ok = self.srv.client.get("/api/streams", timeout=5.0).status_code == 200
            except Exception:
                ok = False
            self.failed += not ok
            self.slowest_s = max(self.slowest_s, time.monotonic() - start)

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join(10)
        return {"requests": self.asked, "unanswered": self.failed, "slowest_s": round(self.slowest_s, 2)}


def node_name(cluster: Any, node_id: str) -> str:
    return next(name for name, node in cluster.nodes.items() if node.node_id == node_id)


def scenario(args: argparse.Namespace) -> dict:
    """Parts 1-7, inside the namespace, in a scratch folder removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="overtime-cluster-") as scratch:
        return _scenario_in(Path(scratch), args)


def _scenario_in(scratch: Path, args: argparse.Namespace) -> dict:
    import ray

    from testing.ray_cluster import RayCluster

    work = scratch / "ray"
    make_video(work / "media" / "clip.mp4", frames=60, size=128, fps=15)
    result: dict[str, Any] = {}
    with RayCluster(head_cpus=0) as cluster:
        for name in ("a", "b"):
            cluster.add_node(name, num_cpus=2)
        srv = server(work, cluster.address).start()
        try:
            ids = [srv.client.post("/api/streams", json={**STREAM, "name": n}).json()["id"] for n in ("one", "two")]
            infos = [running(srv, sid, 10, 120) for sid in ids]
            nodes = [node_name(cluster, info["node"]) for info in infos]
            result["placement"] = {"nodes": nodes, "different": nodes[0] != nodes[1]}
            mapped = cluster.shared_memory()  # every node's frame rings and semaphores, the lost node's among them
            result["addresses"] = sorted({n["NodeManagerAddress"] for n in ray.nodes()})
            result["node_loss"] = lose_node(srv, cluster, ids, infos, args)
            srv = restart_api(srv, work, cluster.address, ids, result)
            mapped |= cluster.shared_memory()
            result["deleted"] = delete_stream(srv, ids[1])
            mapped |= cluster.shared_memory()  # the survivor's, lost in part 5
            result["no_room"] = no_room(srv, cluster, ids[0])
            if not args.quick:
                result["node_added"] = add_node(srv, cluster, result["node_loss"]["killed"])
            mapped |= cluster.shared_memory()
            for sid in [ids[0], *([result["node_added"]["stream"]] if "node_added" in result else [])]:
                srv.client.delete(f"/api/streams/{sid}")  # a node stopped under a stream would leave its rings
            if not args.quick:
                result["rate"] = {"ray": rate(srv, args), "single_machine": None}
        finally:
            srv.stop()
    result["shared_memory_left"] = sorted(path.name for path in mapped if path.exists())
    if not args.quick:
        with server(scratch / "single", None) as single:
            (single.media_dir / "clip.mp4").write_bytes((work / "media" / "clip.mp4").read_bytes())
            result["rate"]["single_machine"] = rate(single, args)
        result["rate"]["ratio"] = result["rate"]["ray"]["fps"] / result["rate"]["single_machine"]["fps"]
    return result


def lose_node(srv: ServerProcess, cluster: Any, ids: list[str], infos: list[dict], args: argparse.Namespace) -> dict:
    victim = node_name(cluster, infos[0]["node"])
    watch, poll = Watch(srv, ids[1]), Poll(srv)
    time.sleep(args.settle_s)
    start = time.monotonic()
    cluster.kill_node(victim)
    back = running(srv, ids[0], 5, RECOVERY_LIMIT_S + 30, unlike=infos[0]["node"])
    recovered_s = time.monotonic() - start
    time.sleep(args.settle_s)
    gap = watch.stop()
    return {
        "killed": victim, "recovered_s": round(recovered_s, 1), "now_on": node_name(cluster, back["node"]),
        "resumed_from": back["resumed_from"], "other_viewer_longest_gap_s": round(gap, 2), "api": poll.stop(),
        "met": recovered_s <= RECOVERY_LIMIT_S and (back["resumed_from"] or 0) > 0 and gap <= GAP_LIMIT_S
        and poll.failed == 0,
    }  # fmt: skip


def no_room(srv: ServerProcess, cluster: Any, sid: str) -> dict:
    """Part 5: the node of ``sid``, the last stream, lost when no other node has room for it (the head has no CPUs);
    its info and ``/metrics`` meanwhile; then a node of 1 CPU joins and the stream must run there from its
    checkpoint."""
    first = srv.wait_for(sid, lambda s: (s["checkpoint_frames"] or 0) > 0, ROOM_WAIT_S, "a checkpoint written")
    result: dict[str, Any] = {"before": {"waiting": srv.metrics().require("overtime_streams_waiting_for_room")}}
    cluster.kill_node(node_name(cluster, first["node"]))
    waiting = srv.wait_for(sid, _waiting_for_room, ROOM_WAIT_S, "waiting for room")
    scrape = srv.metrics()
    result["lost"] = {"state": waiting["state"], "error": waiting["error"],
                      "waiting": scrape.require("overtime_streams_waiting_for_room"),
                      "reconnecting": scrape.require("overtime_streams", state="reconnecting")}  # fmt: skip
    cluster.add_node("room", num_cpus=1)
    back = running(srv, sid, 5, ROOM_WAIT_S, unlike=first["node"])
    result["room"] = {"state": back["state"], "error": back["error"], "resumed_from": back["resumed_from"],
                      "moved": back["node"] != first["node"], "node": node_name(cluster, back["node"]),
                      "waiting": srv.metrics().require("overtime_streams_waiting_for_room")}  # fmt: skip
    lost, room = result["lost"], result["room"]
    result["met"] = (lost["waiting"] == 1 and (lost["error"] or {}).get("code") == "waiting_for_room"
                     and room["moved"] and (room["resumed_from"] or 0) > 0 and room["waiting"] == 0)  # fmt: skip
    return result


def _waiting_for_room(info: dict) -> bool:
    return info["state"] == "reconnecting" and (info["error"] or {}).get("code") == "waiting_for_room"


def add_node(srv: ServerProcess, cluster: Any, name: str) -> dict:
    """A node joins in place of the first lost one; the next stream goes there (part 5's node is full)."""
    cluster.add_node(f"{name}2", num_cpus=2)
    sid = srv.client.post("/api/streams", json={**STREAM, "name": "three"}).json()["id"]
    node = node_name(cluster, running(srv, sid, 5, 120)["node"])
    return {"added": f"{name}2", "stream": sid, "ran_on": node, "met": node == f"{name}2"}


def delete_stream(srv: ServerProcess, sid: str) -> dict:
    """Part 5: the stream deleted; its actor (the fork server's parent) and every process under it gone, its
    temporary folder too, and Ray no longer knows the actor's name."""
    import ray

    from server.placement.ray_actors import NAMESPACE, actor_name

    fork_server = psutil.Process(srv.stream(sid)["pids"]["decoder"]).parent()
    folder = fork_server_folder([fork_server])
    actor = fork_server.parent()
    tree = [actor, *actor.children(recursive=True)]
    answer = srv.client.delete(f"/api/streams/{sid}").status_code
    alive = outlived(tree, 30)

    def actor_gone() -> bool:
        try:
            ray.get_actor(actor_name(sid), namespace=NAMESPACE)
        except ValueError:
            return True
        return False

    listed = {s["id"] for s in srv.client.get("/api/streams").json()}
    result = {"answer": answer, "processes_left": len(alive), "folder_left": folder.exists(),
              "actor_gone": _within(actor_gone, 30), "listed": sid in listed}  # fmt: skip
    result["met"] = answer == 204 and not alive and not folder.exists() and result["actor_gone"] and sid not in listed
    return result


def _within(check: Callable[[], bool], timeout_s: float) -> bool:
    try:
        return until(check, timeout_s, "-")
    except TimeoutError:
        return False


def restart_api(srv: ServerProcess, work: Path, address: str, ids: list[str], result: dict) -> ServerProcess:
    before = {sid: srv.stream(sid) for sid in ids}
    srv.proc.kill()  # SIGKILL: no goodbye to the streams
    srv.proc.wait(10)
    start = time.monotonic()
    srv = server(work, address).start()
    listed = {s["id"] for s in srv.client.get("/api/streams").json()}
    after = {sid: running(srv, sid, 5, 60) for sid in ids}
    viewable = {sid: len(_frames(srv, sid, 2)) == 2 for sid in ids}
    result["api_restart"] = {
        "seconds": round(time.monotonic() - start, 1), "listed": sorted(listed) == sorted(ids),
        "viewable": all(viewable.values()),
        "same_processes": all(after[sid]["pids"] == before[sid]["pids"] for sid in ids),
        "counters_went_on": all(after[s]["counters"]["processed"] > before[s]["counters"]["processed"] for s in ids),
    }  # fmt: skip
    result["api_restart"]["met"] = all(v for k, v in result["api_restart"].items() if k != "seconds")
    return srv


def _frames(srv: ServerProcess, sid: str, n: int) -> list[dict]:
    async def get() -> list[dict]:
        frames = []
        async with websockets.connect(srv.ws(f"/ws/streams/{sid}"), max_size=2**22) as ws:
            while len(frames) < n:
                message = await asyncio.wait_for(ws.recv(), 30)
                if isinstance(message, str) and json.loads(message).get("type") == "frame":
                    frames.append(json.loads(message))
        return frames

    return asyncio.run(get())


def rate(srv: ServerProcess, args: argparse.Namespace) -> dict:
    """Frames learned per second by one stream whose learner sets the pace."""
    sid = srv.client.post("/api/streams", json={**RATE_STREAM, "name": "rate"}).json()["id"]
    running(srv, sid, 10, 120)
    time.sleep(args.settle_s)
    first = srv.stream(sid)["counters"]["processed"]
    start = time.monotonic()
    time.sleep(args.rate_s)
    info = srv.stream(sid)
    seconds = time.monotonic() - start
    srv.client.delete(f"/api/streams/{sid}")
    return {"fps": (info["counters"]["processed"] - first) / seconds, "seconds": round(seconds, 1),
            "learning_size": info["learning_size"], "node": info["node"]}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="parts 1-5 with shorter waits (the suite's run)")
    p.add_argument("--out-dir", type=Path, default=RESULTS)
    p.add_argument("--inside", type=Path, help=argparse.SUPPRESS)  # run the scenario here, its JSON to this file
    args = p.parse_args(argv)
    args.settle_s, args.rate_s = (2.0, 10.0) if args.quick else (5.0, 40.0)
    if args.inside:
        if not netns.inside():
            print("bench.cluster: --inside runs only in a network namespace with loopback alone", file=sys.stderr)
            return 2
        args.inside.write_text(json.dumps(scenario(args)))
        return 0
    available, why = netns.namespace_available()
    if not available:
        print(f"bench.cluster: skipped, {why}")
        return 0
    report = Run()
    flags = ["--quick"] if args.quick else []
    with tempfile.TemporaryDirectory(prefix="overtime-cluster-result-") as scratch:
        out = Path(scratch) / "result.json"
        proc = netns.run_module("bench.cluster", *flags, "--inside", str(out), timeout_s=600)
        if proc.returncode != 0:
            print(proc.stdout[-4000:], proc.stderr[-4000:], file=sys.stderr)
            return 1
        result = json.loads(out.read_text())
    stem = "cluster-quick" if args.quick else "cluster"
    report.directory = args.out_dir
    report.write(stem, "The service on a Ray cluster of three nodes on one machine", markdown(result), result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
