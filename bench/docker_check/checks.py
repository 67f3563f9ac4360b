"""Step 7: the checks run against the started containers, each returning what it measured for the report and
raising ``CheckFailed`` when it does not hold, and ``run_stack``, which runs them in order."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time

import httpx
import numpy as np

from bench.docker_check.repository import IMAGE, PROJECT
from bench.docker_check.shell import CheckFailed, docker, log
from bench.docker_check.stack import Stack, inspect, running, timestamp, wait_demo, wait_ready
from testing.net import HOST
from testing.poll import until
from testing.viewers import ViewerStats, view


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


def loop_windows(stats: ViewerStats, loop_s: float) -> tuple[list[float], list[float]]:
    """Losses of the frames captured in the first and in the last ``loop_s`` seconds the viewer saw. The demo loops a
    clip of ``loop_s`` seconds, so each window holds every part of it once: the two see the same motion and differ
    in the weights only (the first 10 frames against the last 10 would compare two parts of the clip, whose loss
    differs more than learning changes it; as ``loss_falls`` in tests/server_support.py explains)."""
    captured, losses = np.array(stats.captured), np.array(stats.losses)
    first = losses[captured < captured[0] + loop_s]
    last = losses[captured > captured[-1] - loop_s]
    return first.tolist(), last.tolist()


def demo_loop_s(stack: Stack) -> float:
    """Length of the demo clip the stream loops: its frame count over the file's frame rate (the decoder's report)."""
    from server.demo import DEMO_FRAMES

    def fps() -> float | None:
        info = stack.stream()
        return info and info["source_info"].get("fps")

    return DEMO_FRAMES / float(until(fps, 60, "the demo's frame rate in the stream's source_info"))


def check_learns(thread: threading.Thread, out: list[ViewerStats], seconds: float, loop_s: float) -> dict:
    """Frames arrived over the WebSocket with a falling loss: the median over the last loop of the demo clip is
    below the median over the first loop (the cold start)."""
    thread.join(seconds + 60)
    if not out:
        raise CheckFailed("the WebSocket viewer did not finish")
    stats = out[0]
    span = stats.captured[-1] - stats.captured[0] if stats.captured else 0.0
    if span < 2 * loop_s:
        why = stats.closed or "watch longer"
        raise CheckFailed(f"{stats.frames} frames over the WebSocket in {seconds:g} s spanning {span:.1f} s of the "
                          f"stream: not two loops of the {loop_s:g} s demo ({why})")  # fmt: skip
    first, last = loop_windows(stats, loop_s)
    m_first, m_last = float(np.median(first)), float(np.median(last))
    if not m_last < m_first:
        raise CheckFailed(f"the loss did not fall: median over the first loop of the demo {m_first:.4f} "
                          f"({len(first)} frames), over the last {m_last:.4f} ({len(last)} frames)")  # fmt: skip
    return {"frames": stats.frames, "seconds": seconds, "loop_s": loop_s, "first_loop_frames": len(first),
            "first_loop_loss": round(m_first, 4), "last_loop_frames": len(last), "last_loop_loss": round(m_last, 4),
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


def check_stop(container: str, name: str, processed: int) -> dict:
    """``docker stop`` ends the service cleanly and its last act is the final checkpoint, in the named volume."""
    volume = f"{PROJECT}_checkpoints"
    t0 = time.time()
    docker("stop", container, timeout_s=180)
    seconds = time.time() - t0
    state = inspect(container)["State"]
    if state["ExitCode"] != 0:
        raise CheckFailed(f"docker stop: the service exited with {state['ExitCode']} after {seconds:.1f} s "
                          "(137: killed at the stop timeout before it finished)")  # fmt: skip
    # Read in a container of the image (uid 10001 owns the volume), with no network: no root needed on the host.
    probe = (
        "import json, os, pathlib, torch; p = pathlib.Path('/c', os.environ['CKPT']); "
        "s = p.is_file() and torch.load(p, map_location='cpu', weights_only=True); "
        "print(json.dumps(s and {'frames': int(s['pipeline']['frames']), 'saved_at': s['saved_at']}))"
    )
    mount = ["-v", f"{volume}:/c:ro", "-e", f"CKPT={name}.pt"]
    saved = json.loads(docker("run", "--rm", "--network", "none", *mount, IMAGE, "python", "-c", probe, timeout_s=120))
    if not saved:
        raise CheckFailed(f"no checkpoint {name}.pt in volume {volume} after docker stop")
    frames, saved_at = saved["frames"], float(saved["saved_at"])
    if saved_at < t0 or frames <= 0:
        raise CheckFailed(f"{name}.pt in {volume} was not written by the stop (saved {saved_at - t0:+.1f} s from "
                          f"it, {frames} frames)")  # fmt: skip
    return {"seconds": round(seconds, 1), "exit_code": state["ExitCode"], "volume": volume, "file": f"{name}.pt",
            "checkpoint_frames": frames, "written_s_into_stop": round(saved_at - t0, 1),
            "processed_before_stop": processed}  # fmt: skip


def check_resume(stack: Stack, old: str, checkpoint_frames: int, loop_s: float, cold_loss: float) -> dict:
    """A new container on the same volumes resumes the weights: ``resumed_from`` is the checkpoint's frame count,
    and over the first loop of the demo its loss is below the cold start's over the same loop."""
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
    first, _ = loop_windows(stats, loop_s)
    loss = float(np.median(first))
    if not loss < cold_loss:
        raise CheckFailed(f"after the restart the loss over the first loop ({loss:.4f}) is not below the cold "
                          f"start's ({cold_loss:.4f}): the weights did not come back")  # fmt: skip
    return {"new_container": container[:12], "resumed_from": info["resumed_from"], "first_loop_frames": len(first),
            "first_loop_loss": round(loss, 4), "cold_first_loop_loss": cold_loss}  # fmt: skip


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
    log(f"{learn['frames']} frames, loss over the first and last loop {learn['first_loop_loss']} -> "
        f"{learn['last_loop_loss']}")  # fmt: skip
    processed = (stack.stream() or {"counters": {"processed": None}})["counters"]["processed"]
    out["stop"] = check_stop(container, demo["name"], processed)
    log(f"docker stop: {out['stop']['seconds']} s, checkpoint of {out['stop']['checkpoint_frames']} frames")
    out["resume"] = check_resume(stack, container, out["stop"]["checkpoint_frames"], loop_s, learn["first_loop_loss"])
    log(f"a new container resumed from {out['resume']['resumed_from']} frames")
    return out
