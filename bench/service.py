"""Service benchmark: the highest frame rate a stream sustains with zero drops while learning, and the
capture -> overlay latency, measured through a real ``overtime serve`` and a WebSocket viewer.

For each rate of a rising ladder, a fresh stream (a fixed learning size, 128x96 by default, the fast flow net, D
stages) learns on a 30 fps ground-truth video of that size resampled to that rate; after a warm-up, a window of
``--seconds`` must pass without a single frame dropped because the worker fell behind. Latency is the server's
``latency_s`` (decoder capture -> overlay message sent) over the window; the target is p95 <= (D+1)·ΔS + 30 ms.
Real footage with sizes left to the service: ``bench.service_clip``.

    python -m bench.service                       # full run (about 1.5 min per rate): service-cpu-128x96.*
    python -m bench.service --size 128x128        # the size of earlier runs (service-cpu.*)
    python -m bench.service --seconds 10          # quick look
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import websockets

from models.streams import generate, write_mp4
from server.stream.sizing import parse_size
from testing.report import Run
from testing.server import ServerProcess

SOURCE_FPS = 30  # the ground truth moves this fast per source frame; a rate r sees pairs 30/r frames apart
LATENCY_KEYS = ("latency_p50_s", "latency_p95_s", "latency_target_s")


async def measure(srv: ServerProcess, sid: str, warmup_s: float, seconds: float) -> dict:
    """Watch the stream: warm up, then record every frame message of the window."""
    records: list[dict] = []
    async with websockets.connect(srv.ws(f"/ws/streams/{sid}"), max_size=2**22) as ws:
        t_end = None
        dropped0 = None
        while True:
            message = await asyncio.wait_for(ws.recv(), 60)
            if isinstance(message, bytes):
                continue
            m = json.loads(message)
            if m.get("type") != "frame":
                continue
            now = time.monotonic()
            if t_end is None:
                t_start = now + warmup_s
                t_end = t_start + seconds
            if now < t_start:
                continue
            if dropped0 is None:
                dropped0 = srv.stream(sid)["counters"]["dropped"]
            records.append({**m, "window_s": now - t_start})
            if now >= t_end:
                break
    info = srv.stream(sid)
    latency = np.array([r["latency_s"] for r in records])
    dp = np.array([r["dp_s"] for r in records])
    losses = [r["loss"] for r in records if r["loss"] is not None]  # none where a step's pair was known nowhere
    return {
        "frames": len(records),
        "dropped": info["counters"]["dropped"] - dropped0,
        "latency_p50_s": float(np.percentile(latency, 50)),
        "latency_p95_s": float(np.percentile(latency, 95)),
        "dp_mean_s": float(dp.mean()),
        "dp_p95_s": float(np.percentile(dp, 95)),
        "loss_first": float(np.mean(losses[:30])),
        "loss_last": float(np.mean(losses[-30:])),
        "drops_at_s": drop_times(records),
    }


def drop_times(records: list[dict]) -> list[list]:
    """When the stream's drop count rose (each frame message carries it), as [seconds into the window, frames]: what a
    drop came with (a checkpoint every 30 s, the frozen start's scoring, a slow spell of the machine) shows in when."""
    return [[round(b["window_s"], 1), b["dropped"] - a["dropped"]]
            for a, b in itertools.pairwise(records) if b["dropped"] > a["dropped"]]  # fmt: skip


def run(args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory(prefix="overtime-bench-") as tmp:
        work = Path(tmp)
        (work / "media").mkdir()
        width, height = args.size
        frames = generate(max(width, height), 450, seed=3).frames[:, :height, :width]
        write_mp4(np.ascontiguousarray(frames), work / "media" / "bench.mp4", fps=SOURCE_FPS)
        flags = ("--no-demo-stream", "--stages", str(args.stages), "--width", str(width), "--height", str(height))
        rows = []
        with ServerProcess(work, *flags) as srv:
            for fps in args.ladder:
                body = {"source": "file:bench.mp4", "name": f"bench-{fps:g}", "fps": fps, "loop": True}
                sid = srv.client.post("/api/streams", json=body).json()["id"]
                srv.wait_for(sid, lambda i: i["state"] == "running", timeout_s=120, what="running")
                row = {"fps": fps, "ds_s": 1 / fps, **asyncio.run(measure(srv, sid, args.warmup, args.seconds))}
                row["latency_target_s"] = (args.stages + 1) / fps + 0.030
                row["sustained"] = row["dropped"] == 0 and row["frames"] >= 0.95 * fps * args.seconds
                rows.append(row)
                srv.client.delete(f"/api/streams/{sid}")
                print(json.dumps(row), flush=True)
                if not row["sustained"]:
                    break
    best = max((r for r in rows if r["sustained"]), key=lambda r: r["fps"], default=None)
    return {
        "benchmark": "service",
        "size": list(args.size),
        "stages": args.stages,
        "model": "fast",
        "window_s": args.seconds,
        "warmup_s": args.warmup,
        "best_fps_zero_drops": best["fps"] if best else None,
        "latency_at_best": {k: best[k] for k in ("latency_p50_s", "latency_p95_s", "latency_target_s")}
        if best
        else None,
        "rows": rows,
    }


def markdown(result: dict) -> str:
    lines = [
        f"Highest rate sustained for {result['window_s']:g} s with zero drops: "
        f"**{result['best_fps_zero_drops']} fps**.",
        "",
        "| fps | frames | dropped | ΔP mean | ΔP p95 | latency p50 | latency p95 | p95 target | loss first→last |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in result["rows"]:
        ms = {k: f"{r[k] * 1e3:.0f} ms" for k in ("dp_mean_s", "dp_p95_s", *LATENCY_KEYS)}
        lines.append(
            f"| {r['fps']:g} | {r['frames']} | {r['dropped']} | {ms['dp_mean_s']} | {ms['dp_p95_s']}"
            f" | {ms['latency_p50_s']} | {ms['latency_p95_s']} | {ms['latency_target_s']}"
            f" | {r['loss_first']:.4f}→{r['loss_last']:.4f} |"
        )
    lines += [
        f"\nDropped at {r['fps']:g} fps (s into the window: frames): "
        + ", ".join(f"{t:g}: {n}" for t, n in r["drops_at_s"])
        for r in result["rows"]
        if r.get("drops_at_s")
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ladder", type=float, nargs="+", default=[8, 10, 12, 15, 20, 25, 30])
    p.add_argument("--seconds", type=float, default=60.0, help="measured window per rate")
    p.add_argument("--warmup", type=float, default=10.0)
    p.add_argument("--size", type=parse_size, default=(128, 96), help="learning size WxH (fixed), default 128x96")
    p.add_argument("--stages", type=int, default=2)
    p.add_argument("--out", help="results file stem under bench/results/ (default: service-cpu-WxH)")
    args = p.parse_args(argv)
    report = Run()
    result = run(args)
    size = f"{args.size[0]}x{args.size[1]}"
    title = f"Service benchmark ({size}, fast flow net, D={args.stages}, CPU)"
    report.write(args.out or f"service-cpu-{size}", title, markdown(result), result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
