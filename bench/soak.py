"""Soak: the demo stream learning for ``--duration`` (default 10 minutes) with ``--viewers`` (default 5) watching.

Every ``--sample`` s it records the resident memory and open file descriptors of every process of the server
(API, decoder, worker and helpers, through psutil) and the stream's checkpoint. Pass: after the warm-up (the
first ``--warmup`` fraction of the run) no process's RSS grows by 5 % or more and none gains file descriptors;
no process was replaced (no silent restarts); checkpoints kept being written (the frame count in the checkpoint
file rose in every quarter of the run after the warm-up). Writes ``bench/results/soak.{json,md}``
(``soak-smoke`` for short runs).

    python -m bench.soak                       # 10 minutes
    python -m bench.soak --duration 60         # a smoke run
"""

from __future__ import annotations

import argparse
import itertools
import tempfile
import time
from pathlib import Path

import torch

from bench.probe import rss_and_fds
from testing.report import Run
from testing.server import ServerProcess, small_server
from testing.viewers import ViewerPool

FD_SLACK = 2  # a scrape or a REST call in flight may hold a socket at the moment of a sample


def checkpoint_frames(path: Path) -> int | None:
    try:
        return int(torch.load(path, map_location="cpu", weights_only=True)["pipeline"]["frames"])
    except (OSError, RuntimeError, KeyError):
        return None


def roles(srv: ServerProcess, info: dict) -> dict[int, str]:
    return {srv.proc.pid: "API process"} | {pid: role for role, pid in info["pids"].items() if pid}


def soak(srv: ServerProcess, args: argparse.Namespace) -> dict:
    samples: list[dict] = []
    with srv.api() as api:
        sid = api.create({"source": "demo", "name": "soak"})["id"]
        api.wait_processed(sid, 10, 300)
        viewers = ViewerPool(srv.ws(f"/ws/streams/{sid}"), args.viewers, 0, args.duration)
        t0 = time.monotonic()
        for _ in range(int(args.duration / args.sample) + 1):  # bounded by count and by the duration
            info = api.get(sid)
            samples.append(
                {
                    "t": round(time.monotonic() - t0, 1),
                    "procs": rss_and_fds(srv.processes(), roles(srv, info)),
                    "processed": info["counters"]["processed"],
                    "dropped": info["counters"]["dropped"],
                    "loss": info["loss"],
                    "checkpoint": checkpoint_frames(srv.checkpoint_dir / "soak.pt"),
                }
            )
            left = args.duration - (time.monotonic() - t0)
            if left <= 0:
                break
            time.sleep(min(args.sample, left))
        stats = viewers.result()
        final = api.get(sid)
        m = api.metrics()
        api.delete(sid)
    return analyse(samples, args) | {
        "viewer_frames": [s.frames for s in stats],
        "viewers_closed_early": sum(s.closed is not None for s in stats),
        "counters": final["counters"],
        "nonfinite_metric": m.value("overtime_nonfinite_losses_total", stream=sid),
        "worker_restarts_metric": m.value("overtime_worker_restarts_total", stream=sid),
    }


def analyse(samples: list[dict], args: argparse.Namespace) -> dict:
    warm = next(s for s in samples if s["t"] >= args.warmup * args.duration)
    tail = samples[-3:]
    procs = {}
    for pid, p in warm["procs"].items():
        later = [s["procs"].get(pid) for s in tail]
        alive = all(x is not None for x in later)
        rss_end = sum(x["rss"] for x in later if x) / max(1, sum(x is not None for x in later))
        procs[str(pid)] = {
            "cmd": p["cmd"],
            "rss_warm_mb": round(p["rss"] / 2**20, 1),
            "rss_end_mb": round(rss_end / 2**20, 1),
            "rss_growth_pct": round(100 * (rss_end / p["rss"] - 1), 2),
            "fds_warm": p["fds"],
            "fds_end": max((x["fds"] for x in later if x), default=None),
            "alive_to_the_end": alive,
        }
    replaced = set(samples[-1]["procs"]) - set(warm["procs"])
    after = samples[samples.index(warm) :]  # the first checkpoint comes one interval into the run
    quarters = [after[int(i * (len(after) - 1) / 4)]["checkpoint"] for i in range(5)]
    checks = {
        "rss_growth_under_5pct": all(p["rss_growth_pct"] < 5 for p in procs.values()),
        "no_fd_growth": all(
            p["fds_end"] is not None and p["fds_end"] <= p["fds_warm"] + FD_SLACK for p in procs.values()
        ),
        "no_process_replaced": not replaced and all(p["alive_to_the_end"] for p in procs.values()),
        "checkpoints_kept_coming": all(
            a is not None and b is not None and b > a for a, b in itertools.pairwise(quarters)
        ),
    }
    first, last = samples[0], samples[-1]
    rate = (last["processed"] - first["processed"]) / max(1e-9, last["t"] - first["t"])
    return {
        "processes": procs,
        "checkpoint_frames_by_quarter": quarters,
        "fps_processed": round(rate, 2),
        "worker_behind_drops": last["dropped"] - first["dropped"],
        "loss_first_last": [first["loss"], last["loss"]],
        "checks": checks,
        "ok": all(checks.values()),
        "samples": samples,
    }


def table(r: dict, args: argparse.Namespace) -> str:
    lines = [
        "| process | RSS after warm-up MB | RSS at end MB | growth % | fds after warm-up | fds at end |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {p['cmd']} | {p['rss_warm_mb']} | {p['rss_end_mb']} | {p['rss_growth_pct']} | {p['fds_warm']} | "
        f"{p['fds_end']} |"
        for p in r["processes"].values()
    ]
    lines += [
        "",
        f"checkpoint frames by quarter: {r['checkpoint_frames_by_quarter']}; processed {r['fps_processed']} fps, "
        f"{r['worker_behind_drops']} worker-behind drops; checks: {r['checks']}",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=600.0, help="seconds")
    parser.add_argument("--viewers", type=int, default=5)
    parser.add_argument("--sample", type=float, default=10.0, help="seconds between samples")
    parser.add_argument("--warmup", type=float, default=0.2, help="fraction of the run before the baseline")
    parser.add_argument("--size", type=int, default=None, help="frame size (default: the server's)")
    parser.add_argument("--checkpoint-interval", type=float, default=None, help="seconds (default: the run / 20)")
    args = parser.parse_args(argv)
    args.sample = min(args.sample, args.duration / 8)
    interval = args.checkpoint_interval or max(2.0, args.duration / 20)
    run = Run()
    with tempfile.TemporaryDirectory(prefix="overtime-soak-") as tmp:
        size = str(args.size or 128)  # the demo's own size unless --size
        settings = {"OVERTIME_CHECKPOINT_INTERVAL_S": str(interval), "OVERTIME_WIDTH": size, "OVERTIME_HEIGHT": size}
        srv = small_server(Path(tmp), settings=settings)
        with srv:
            r = soak(srv, args) | {"args": vars(args), "checkpoint_interval_s": interval}
    title = f"Soak: demo stream, {args.viewers} viewers, {args.duration:g} s"
    run.write("soak" if args.duration >= 600 else "soak-smoke", title, table(r, args), r)
    return 0 if r["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
