"""Load: many WebSocket viewers on one stream, then several streams at once with one source failing.

1. Viewers. One stream (a looped 64x64 file at 15 fps). Its processed-frame rate is measured with 1 viewer, then
   with ``--viewers`` (default 50, half of them slow readers that take one message per ``--slow-delay`` s through
   a tiny socket buffer) for ``--duration`` s each. Pass: the rate with many viewers is within 5 % of the rate
   with one; the slow viewers' skipped frames show in ``overtime_ws_dropped_total``; REST p95 < 100 ms throughout.
2. Streams. Streams are added one at a time (each measured ``--window`` s) until one falls below 95 % of its fps
   or its worker falls behind on more than 2 % of its frames: the last count that held is what this machine
   sustains. Then that many streams run with one more whose live source is killed mid-run: the others' rates
   after the failure stay within 5 % of before.

Writes ``bench/results/load-viewers.{json,md}`` and ``load-streams.{json,md}``.

    python -m bench.load                      # the full run (about 6 minutes)
    python -m bench.load --duration 10 --window 8 --max-streams 3   # a quick look
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from bench.probe import ApiProbe
from testing.api import Api
from testing.media import make_video
from testing.report import Run
from testing.server import ServerProcess, small_server
from testing.sources import LiveSource
from testing.viewers import ViewerPool

CLIP = "clip.mp4"


def processed_rates(api: Api, sids: list[str], window_s: float) -> tuple[dict[str, float], dict[str, float]]:
    """Processed frames per second and worker-behind drops of each stream over one window (from /metrics)."""

    def counts() -> dict[str, tuple[float, float]]:
        m = api.metrics()
        return {
            s: (
                m.value("overtime_frames_total", stream=s, outcome="processed"),
                m.value("overtime_frames_total", stream=s, outcome="dropped", reason="worker_behind"),
            )
            for s in sids
        }

    before, t0 = counts(), time.monotonic()
    time.sleep(window_s)
    after, dt = counts(), time.monotonic() - t0
    return ({s: (after[s][0] - before[s][0]) / dt for s in sids}, {s: after[s][1] - before[s][1] for s in sids})


def viewers_run(srv: ServerProcess, api: Api, args: argparse.Namespace) -> dict:
    sid = api.create({"source": f"file:{CLIP}", "name": "load", "fps": args.fps, "loop": True})["id"]
    api.wait_processed(sid, 3 * int(args.fps), 120)  # warm-up
    url = srv.ws(f"/ws/streams/{sid}")
    runs = {}
    for label, fast, slow in (("one", 1, 0), ("many", args.viewers - args.viewers // 2, args.viewers // 2)):
        dropped0 = api.metrics().value("overtime_ws_dropped_total", stream=sid)
        pool = ViewerPool(url, fast, slow, args.duration, args.slow_delay)
        time.sleep(2.0)  # everyone connected
        with ApiProbe(api, sid) as probe:
            rates, behind = processed_rates(api, [sid], args.duration - 4.0)
        stats = pool.result()
        m = api.metrics()
        runs[label] = {
            "viewers": fast + slow,
            "slow": slow,
            "fps_processed": round(rates[sid], 3),
            "worker_behind": behind[sid],
            "ws_dropped": m.value("overtime_ws_dropped_total", stream=sid) - dropped0,
            "fast_frames_min": min(s.frames for s in stats[:fast]),
            "slow_frames_max": max((s.frames for s in stats[fast:]), default=None),
            "closed_early": sum(s.closed is not None for s in stats),
            "api": probe.summary(),
        }
    api.delete(sid)
    one, many = runs["one"], runs["many"]
    ratio = many["fps_processed"] / one["fps_processed"]
    checks = {
        "rate_within_5pct": abs(ratio - 1) <= 0.05,
        "slow_drops_counted": many["ws_dropped"] > 0 and many["slow_frames_max"] < many["fast_frames_min"],
        "api_p95_under_100ms": many["api"]["p95_ms"] < 100 and one["api"]["p95_ms"] < 100,
        "no_viewer_cut_off": many["closed_early"] == 0,
    }
    return {"runs": runs, "rate_ratio": round(ratio, 4), "checks": checks, "ok": all(checks.values())}


def streams_run(srv: ServerProcess, api: Api, args: argparse.Namespace) -> dict:
    sids: list[str] = []
    steps, sustained = [], 0
    for k in range(1, args.max_streams + 1):
        sids.append(api.create({"source": f"file:{CLIP}", "name": f"s{k}", "fps": args.fps, "loop": True})["id"])
        api.wait_processed(sids[-1], 2 * int(args.fps), 120)
        rates, behind = processed_rates(api, sids, args.window)
        # held: every stream at >= 95 % of its fps, and the worker behind for at most 2 % of its frames
        held = all(rates[s] >= 0.95 * args.fps and behind[s] <= 0.02 * rates[s] * args.window for s in sids)
        steps.append(
            {
                "streams": k,
                "fps": [round(r, 2) for r in rates.values()],
                "worker_behind": sum(behind.values()),
                "held": held,
            }
        )
        if not held:
            break
        sustained = k
    for sid in sids[sustained:]:
        api.delete(sid)
    sids = sids[:sustained]
    failing = None
    if sids:
        with LiveSource(srv.media_dir / CLIP) as live:
            failing = api.create({"source": live.url, "name": "failing", "fps": args.fps})["id"]
            api.wait_processed(failing, 2 * int(args.fps), 120)
            before, _ = processed_rates(api, sids, args.window)
            live.stop()  # the source dies and stays away: reconnects with back-off for the rest of the run
            api.wait(failing, 30, "the failing stream noticed", lambda s: s["state"] != "running")
            after, behind = processed_rates(api, sids, args.window)
            state = api.get(failing)
    worst = min((after[s] / before[s] for s in sids), default=None) if sids else None
    result = {
        "steps": steps,
        "sustained_streams": sustained,
        "with_failing_source": None
        if failing is None
        else {
            "before_fps": [round(before[s], 2) for s in sids],
            "after_fps": [round(after[s], 2) for s in sids],
            "worker_behind_after": sum(behind.values()),
            "worst_ratio": round(worst, 4),
            "failing_state": state["state"],
            "failing_error": state["error"],
            "failing_reconnects": state["counters"]["reconnects"],
        },
    }
    result["ok"] = bool(sustained) and worst is not None and worst >= 0.95
    for sid in [*sids, failing]:
        if sid:
            api.delete(sid)
    return result


def viewers_table(r: dict) -> str:
    lines = [
        "| viewers (slow) | processed fps | worker-behind drops | ws drops | fast viewer min frames | "
        "slow viewer max frames | API p50 / p95 ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for run in r["runs"].values():
        lines.append(
            f"| {run['viewers']} ({run['slow']}) | {run['fps_processed']} | {run['worker_behind']:g} | "
            f"{run['ws_dropped']:g} | {run['fast_frames_min']} | {run['slow_frames_max']} | "
            f"{run['api']['p50_ms']} / {run['api']['p95_ms']} |"
        )
    lines += ["", f"rate ratio many/one: {r['rate_ratio']}; checks: {r['checks']}", ""]
    return "\n".join(lines)


def streams_table(r: dict) -> str:
    lines = [
        "| streams | fps per stream | worker-behind drops | held |",
        "|---|---|---|---|",
    ]
    lines += [f"| {s['streams']} | {s['fps']} | {s['worker_behind']:g} | {s['held']} |" for s in r["steps"]]
    lines += ["", f"sustained: **{r['sustained_streams']}** streams", ""]
    if r["with_failing_source"]:
        f = r["with_failing_source"]
        lines += [
            f"With one more stream whose live source dies: others' fps before {f['before_fps']}, after "
            f"{f['after_fps']} (worst ratio {f['worst_ratio']}); failing stream: {f['failing_state']} "
            f"({(f['failing_error'] or {}).get('code')}), {f['failing_reconnects']} reconnects.",
            "",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--viewers", type=int, default=50)
    parser.add_argument("--slow-delay", type=float, default=0.5, help="seconds a slow viewer waits per message")
    parser.add_argument("--fps", type=float, default=15.0)
    parser.add_argument("--duration", type=float, default=60.0, help="seconds per viewer run")
    parser.add_argument("--window", type=float, default=20.0, help="seconds per streams measurement")
    parser.add_argument("--max-streams", type=int, default=8)
    parser.add_argument("--only", choices=("viewers", "streams"), help="run one part")
    args = parser.parse_args(argv)
    ok = True
    run = Run()
    with tempfile.TemporaryDirectory(prefix="overtime-load-") as tmp:
        srv = small_server(
            Path(tmp),
            settings={
                "OVERTIME_ALLOW_PRIVATE": "true",
                "OVERTIME_MAX_STREAMS": str(args.max_streams + 1),
                "OVERTIME_RECONNECT_MAX_S": "5",
            },
        )
        make_video(srv.media_dir / CLIP, frames=150, fps=int(args.fps))
        with srv, srv.api() as api:
            if args.only in (None, "viewers"):
                r = viewers_run(srv, api, args) | {"args": vars(args)}
                run.write("load-viewers", "Load: WebSocket viewers on one 64x64 stream", viewers_table(r), r)
                ok &= r["ok"]
            if args.only in (None, "streams"):
                r = streams_run(srv, api, args) | {"args": vars(args)}
                run.write("load-streams", "Load: several 64x64 streams at once", streams_table(r), r)
                ok &= r["ok"]
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
