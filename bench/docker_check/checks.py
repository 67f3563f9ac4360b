"""Step 7: the checks run against the started containers, each returning what it measured for the report and
raising ``CheckFailed`` when it does not hold, and ``run_stack``, which runs them in order."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

import httpx
import numpy as np
import torch

from bench.docker_check.demo_loss import demo_pairs, relative_loss
from bench.docker_check.repository import PROJECT, WORK
from bench.docker_check.shell import CheckFailed, docker, log
from bench.docker_check.stack import Stack, inspect, running, timestamp, wait_demo, wait_ready
from testing.net import HOST
from testing.poll import until
from testing.viewers import ViewerStats, view

CHECKPOINTS = "/data/checkpoints"  # the image's OVERTIME_CHECKPOINT_DIR, the compose file's volume
SHIPPED_WEIGHTS = "/app/models/weights"  # the pretrained starts in the image (WORKDIR /app)


def check_healthy(container: str) -> dict:
    """HEALTHCHECK reaches healthy; seconds from the container's start to the first passing probe."""

    def healthy() -> dict | None:
        state = running(container)
        if state["Health"]["Status"] == "unhealthy":
            raise CheckFailed(f"the container turned unhealthy: {state['Health']['Log'][-1:]}")
        return state if state["Health"]["Status"] == "healthy" else None

    state = until(healthy, 240, "HEALTHCHECK healthy", 0.5)
    probes = state["Health"]["Log"]
    first_ok = next(p for p in probes if p["ExitCode"] == 0)
    failed = sum(p["ExitCode"] != 0 for p in probes[: probes.index(first_ok)])
    return {"healthy_after_s": round(timestamp(first_ok["End"]) - timestamp(state["StartedAt"]), 1),
            "failed_probes_before": failed}  # fmt: skip


def check_non_root(container: str) -> dict:
    """Every process of the container (API, decoder, worker) runs as the image's uid, and so does ``docker exec``."""
    rows = [line.split(None, 2) for line in docker("top", container, "-eo", "uid,pid,args").splitlines()[1:]]
    uids = sorted({uid for uid, _, _ in rows})
    exec_uid = docker("exec", container, "id", "-u")
    if uids != ["10001"] or exec_uid != "10001":
        raise CheckFailed(f"processes run as uids {uids}, docker exec as {exec_uid}: expected 10001 only")
    return {"uids": uids, "processes": len(rows), "exec_uid": exec_uid}


def watch(stack: Stack, sid: str, seconds: float) -> tuple[threading.Thread, list[ViewerStats]]:
    """A WebSocket viewer of the stream for ``seconds``, in a thread (``testing/viewers.py``); its stats land in the
    returned list."""
    out: list[ViewerStats] = []
    url = f"ws://{HOST}:{stack.port}/ws/streams/{sid}"
    thread = threading.Thread(target=lambda: out.append(asyncio.run(view(url, seconds))), daemon=True)
    thread.start()
    return thread, out


def loop_windows(stats: ViewerStats, loop_s: float) -> dict[str, np.ndarray]:
    """Each frame's loss relative to zero flow's on the same pair, over the first and over the last ``loop_s``
    seconds the viewer saw. The demo loops a clip of ``loop_s`` seconds, so each window holds every part of it once:
    the two see the same motion and differ in the weights only (the first 10 frames against the last 10 would compare
    two parts of the clip, whose loss differs more than learning changes it; as ``loss_falls`` in
    tests/server_support.py explains). Relative to zero flow's, the baseline every frame carries: below 1, the flow
    is better than none. Not comparable across learning sizes, which the service moves while it settles its frame
    budget (``demo_loss`` says why, and how learning is judged instead)."""
    captured = np.array(stats.captured)
    relative = np.array(stats.losses) / np.array(stats.losses_zero)
    return {"first": relative[captured < captured[0] + loop_s], "last": relative[captured > captured[-1] - loop_s]}


def demo_loop_s(stack: Stack) -> float:
    """Length of the demo clip the stream loops: its frame count over the file's frame rate (the decoder's report)."""
    from server.stream.source.demo import DEMO_FRAMES

    def fps() -> float | None:
        info = stack.stream()
        return info and info["source_info"].get("fps")

    return DEMO_FRAMES / float(until(fps, 60, "the demo's frame rate in the stream's source_info"))


#: How much worse than the shipped weights the weights learned in the container may do on the demo clip (its loss
#: relative to zero flow's, the same pairs at one size: ``demo_loss``). Online learning adapts the shipped weights
#: (``models/weights``) at a small rate that must not wreck them.
NOT_WRECKED = 1.10


def check_learns(thread: threading.Thread, out: list[ViewerStats], seconds: float, loop_s: float) -> dict:
    """Frames arrived over the WebSocket from a net that does what a user is promised: over the last loop of the
    demo clip its loss is below zero flow's on the same pairs (the baseline every frame carries). The first loop's is
    reported beside it, not compared: the service moves the learning size in between (``demo_loss`` says why that
    matters). That it learned, and did not wreck the shipped weights, is checked on the checkpoint ``docker stop``
    writes (``check_stop``, ``check_not_wrecked``)."""
    thread.join(seconds + 60)
    if not out:
        raise CheckFailed("the WebSocket viewer did not finish")
    stats = out[0]
    span = stats.captured[-1] - stats.captured[0] if stats.captured else 0.0
    if span < 2 * loop_s:
        why = stats.closed or "watch longer"
        raise CheckFailed(f"{stats.frames} frames over the WebSocket in {seconds:g} s spanning {span:.1f} s of the "
                          f"stream: not two loops of the {loop_s:g} s demo ({why})")  # fmt: skip
    windows = loop_windows(stats, loop_s)
    first, last = (float(np.nanmedian(windows[k])) for k in ("first", "last"))
    if not last < 1:
        raise CheckFailed(f"over the last loop of the demo the net's loss is {last:.3f} of zero flow's on the same "
                          "pairs (median): its flow is no better than none")  # fmt: skip
    return {"frames": stats.frames, "seconds": seconds, "loop_s": loop_s,
            "learning_sizes": sorted({tuple(size) for size in stats.sizes}, reverse=True),
            "first_loop_frames": len(windows["first"]), "first_loop_relative": round(first, 3),
            "last_loop_frames": len(windows["last"]), "last_loop_relative": round(last, 3),
            "closed": stats.closed}  # fmt: skip


def check_scrape(stack: Stack) -> dict:
    """Debian's Prometheus scrapes the service with the repository's config and evaluates its alert rules."""

    def target_up() -> dict | None:
        with contextlib.suppress(httpx.HTTPError, ValueError, KeyError):
            targets = stack.prometheus.get("/api/v1/targets").json()["data"]["activeTargets"]
            return next((t for t in targets if t["labels"]["job"] == "overtime" and t["health"] == "up"), None)
        return None

    try:
        target = until(target_up, 120, "Prometheus: the overtime target up", 1.0)
    except TimeoutError as exc:
        raise CheckFailed(str(exc)) from exc
    query = stack.prometheus.get("/api/v1/query", params={"query": "count({__name__=~'overtime_.+'})"}).json()
    series = int(float(query["data"]["result"][0]["value"][1])) if query["data"]["result"] else 0
    if series == 0:
        raise CheckFailed("Prometheus scraped the target but holds no overtime_* series")
    groups = stack.prometheus.get("/api/v1/rules").json()["data"]["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    bad = [rule["name"] for rule in rules if rule.get("health") != "ok"]
    version = stack.prometheus.get("/api/v1/status/buildinfo").json()["data"]["version"]
    return {"prometheus": version, "scrape_url": target["scrapeUrl"], "target": target["labels"]["instance"],
            "overtime_series": series, "rules": len(rules), "rules_not_ok": bad}  # fmt: skip


def stop(container: str) -> dict:
    """``docker stop``: the service must end cleanly (exit 0), its last act the final checkpoint."""
    t0 = time.time()
    docker("stop", container, timeout_s=180)
    seconds = time.time() - t0
    state = inspect(container)["State"]
    if state["ExitCode"] != 0:
        raise CheckFailed(f"docker stop: the service exited with {state['ExitCode']} after {seconds:.1f} s "
                          "(137: killed at the stop timeout before it finished)")  # fmt: skip
    return {"started": t0, "seconds": round(seconds, 1), "exit_code": state["ExitCode"]}


def copy_out(container: str, path: str) -> dict:
    """A ``torch.save`` file from the (stopped) container, loaded here: ``docker cp`` reads its volumes too."""
    local = WORK / f"{container[:12]}-{path.rsplit('/', 1)[-1]}"
    local.unlink(missing_ok=True)
    try:
        docker("cp", f"{container}:{path}", str(local))
    except CheckFailed as exc:
        raise CheckFailed(f"no {path} in the container: {exc}") from exc
    return torch.load(local, map_location="cpu", weights_only=True)


def checkpoint_weights(checkpoint: dict) -> dict[str, torch.Tensor]:
    """The net's weights in a stream's checkpoint by layer name: its stages keep the whole net's names."""
    return {k: v.float() for stage in checkpoint["pipeline"]["stages"] for k, v in stage["module"].items()}


def distance(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """Euclidean distance between two sets of the same net's weights."""
    if a.keys() != b.keys():
        raise CheckFailed(f"the weights name different tensors: {sorted(a.keys() ^ b.keys())[:4]}")
    return float(torch.sqrt(sum(((a[k] - b[k].float()) ** 2).sum() for k in a)))


def shipped_weights(container: str, stream: dict) -> dict[str, torch.Tensor]:
    """The pretrained weights the image ships for the stream's net (``models/weights``), which the demo starts from."""
    if stream["init"] != "pretrained":
        raise CheckFailed(f"the demo started from {stream['init']!r} weights: expected the default, 'pretrained'")
    return copy_out(container, f"{SHIPPED_WEIGHTS}/{stream['model']}.pt")


def check_stop(container: str, stream: dict, processed: int,
               shipped: dict[str, torch.Tensor]) -> tuple[dict, dict[str, torch.Tensor]]:  # fmt: skip
    """``docker stop`` ends the service cleanly and its last act is the final checkpoint, in the named volume; its
    weights are not the ``shipped`` ones the demo started from: it learned."""
    stopped = stop(container)
    saved = copy_out(container, f"{CHECKPOINTS}/{stream['name']}.pt")
    frames, saved_at = int(saved["pipeline"]["frames"]), float(saved["saved_at"])
    if saved_at < stopped["started"] or frames <= 0:
        raise CheckFailed(f"{stream['name']}.pt was not written by the stop (saved "
                          f"{saved_at - stopped['started']:+.1f} s from it, {frames} frames)")  # fmt: skip
    weights = checkpoint_weights(saved)
    moved = distance(weights, shipped)
    if not moved > 0:
        raise CheckFailed(f"after {frames} frames the checkpoint holds the shipped weights unchanged: nothing learned")
    return {"seconds": stopped["seconds"], "exit_code": stopped["exit_code"], "volume": f"{PROJECT}_checkpoints",
            "file": f"{stream['name']}.pt", "checkpoint_frames": frames,
            "written_s_into_stop": round(saved_at - stopped["started"], 1), "processed_before_stop": processed,
            "moved_from_shipped": round(moved, 4)}, weights  # fmt: skip


def check_not_wrecked(net_name: str, shipped: dict[str, torch.Tensor], learned: dict[str, torch.Tensor]) -> dict:
    """The weights learned in the container do no worse on the demo clip than the shipped ones, by more than
    ``NOT_WRECKED``: both run here on the same frame pairs at the demo's own size."""
    pairs = demo_pairs()
    before, after = relative_loss(net_name, shipped, pairs), relative_loss(net_name, learned, pairs)
    if not after <= NOT_WRECKED * before:
        raise CheckFailed(f"learning made the net worse: on the demo clip its loss relative to zero flow's is "
                          f"{after:.3f} with the checkpoint's weights, {before:.3f} with the shipped ones")  # fmt: skip
    return {"pairs": len(pairs), "size": list(pairs[0].shape[:-3:-1]), "shipped_relative": round(before, 4),
            "learned_relative": round(after, 4)}  # fmt: skip


def check_resume(stack: Stack, old: str, checkpoint_frames: int, loop_s: float, stopped: dict[str, torch.Tensor],
                 shipped: dict[str, torch.Tensor]) -> dict:  # fmt: skip
    """A new container on the same volumes resumes the weights: ``resumed_from`` is the checkpoint's frame count,
    its flow beats zero flow over the first loop, and the weights it has learned from there when it is stopped in
    turn lie nearer the checkpoint than the shipped start (a container that started afresh would have moved away from
    the shipped weights by about one loop of learning, the resumed one from the checkpoint)."""
    stack("rm", "-f", "-s", "overtime")
    container = stack.up("overtime")
    if container == old:
        raise CheckFailed("compose reused the stopped container: expected a new one")
    info = wait_ready(stack, container)
    if info["resumed_from"] != checkpoint_frames:
        raise CheckFailed(f"the new container resumed from {info['resumed_from']} frames, the checkpoint has "
                          f"{checkpoint_frames}")  # fmt: skip
    thread, out = watch(stack, info["id"], loop_s + 5)
    thread.join(loop_s + 65)
    stats = out[0] if out else ViewerStats()
    if not stats.captured or stats.captured[-1] - stats.captured[0] < loop_s:
        raise CheckFailed(f"after the restart, {stats.frames} frames: not one loop of the demo ({stats.closed})")
    windows = loop_windows(stats, loop_s)
    relative = float(np.nanmedian(windows["first"]))
    if not relative < 1:
        raise CheckFailed(f"after the restart the net's loss over the first loop is {relative:.3f} of zero flow's "
                          "on the same pairs (median): no better than none")  # fmt: skip
    stop(container)
    later = checkpoint_weights(copy_out(container, f"{CHECKPOINTS}/{info['name']}.pt"))
    from_checkpoint, from_shipped = distance(later, stopped), distance(later, shipped)
    if not from_checkpoint < from_shipped:
        raise CheckFailed(f"the resumed net's weights lie nearer the shipped start ({from_shipped:.4f}) than the "
                          f"checkpoint ({from_checkpoint:.4f}): its weights did not come back")  # fmt: skip
    return {"new_container": container[:12], "resumed_from": info["resumed_from"],
            "first_loop_frames": len(windows["first"]), "first_loop_relative": round(relative, 3),
            "frames_after": stats.frames,
            "from_checkpoint": round(from_checkpoint, 4), "from_shipped": round(from_shipped, 4)}  # fmt: skip


def run_stack(stack: Stack, watch_s: float) -> dict:
    """Start the service and Prometheus on fresh volumes and run every check; their results by name."""
    out: dict = {}
    stack("down", "-v", "--remove-orphans")  # what an interrupted earlier run left
    log(f"compose up overtime (127.0.0.1:{stack.port}) and prometheus (127.0.0.1:{stack.prometheus_port})")
    container = stack.up("overtime", "prometheus")
    wait_demo(stack, container)
    api_after_s = round(time.time() - timestamp(inspect(container)["State"]["StartedAt"]), 1)
    demo = wait_ready(stack, container)
    if demo["resumed_from"]:
        raise CheckFailed(f"a fresh volume, yet the demo resumed from {demo['resumed_from']} frames")
    thread, viewer = watch(stack, demo["id"], watch_s)
    out["health"] = check_healthy(container) | {"api_after_s": api_after_s}
    log(f"healthy after {out['health']['healthy_after_s']} s")
    out["non_root"] = check_non_root(container)
    out["scrape"] = check_scrape(stack)
    log(f"Prometheus {out['scrape']['prometheus']} scrapes {out['scrape']['scrape_url']}")
    loop_s = demo_loop_s(stack)
    out["learn"] = check_learns(thread, viewer, watch_s, loop_s)
    learn = out["learn"]
    log(f"{learn['frames']} frames, loss relative to zero flow's over the first and last loop "
        f"{learn['first_loop_relative']} -> {learn['last_loop_relative']}")  # fmt: skip
    processed = (stack.stream() or {"counters": {"processed": None}})["counters"]["processed"]
    shipped = shipped_weights(container, demo)
    out["stop"], weights = check_stop(container, demo, processed, shipped)
    log(f"docker stop: {out['stop']['seconds']} s, checkpoint of {out['stop']['checkpoint_frames']} frames, "
        f"{out['stop']['moved_from_shipped']} from the shipped weights")  # fmt: skip
    out["not_wrecked"] = check_not_wrecked(demo["model"], shipped, weights)
    log(f"on the demo clip, loss relative to zero flow's: shipped {out['not_wrecked']['shipped_relative']}, "
        f"learned {out['not_wrecked']['learned_relative']}")  # fmt: skip
    out["resume"] = check_resume(stack, container, out["stop"]["checkpoint_frames"], loop_s, weights, shipped)
    log(f"a new container resumed from {out['resume']['resumed_from']} frames")
    return out
