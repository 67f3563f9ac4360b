"""Live-source outage: an HTTP MPEG-TS source goes away for ``--pause`` seconds (default: the documented 40 s) and
comes back on the same URL. The stream must go ``reconnecting``, return to ``running`` on its own, count the
reconnects, and resume from the checkpoint its stopping worker wrote. ``tests/test_faults.py`` runs the same
scenario with a short pause. Writes ``bench/results/outage.json`` and ``.md``.

    python -m bench.outage               # 40 s outage
    python -m bench.outage --pause 10
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from bench.harness import Api, LiveSource, Server, make_video
from bench.report import Run


def outage(api: Api, video: Path, pause_s: float, name: str) -> dict:
    """Run the scenario on a started server (which must allow loopback sources); the measurements as a dict. The
    stream is deleted at the end, so that nothing of it (a final checkpoint, say) overlaps what runs next."""
    live = LiveSource(video).start()
    sid = None
    try:
        sid = api.create(live.url, name=name, fps=15)["id"]
        api.wait_processed(sid, 20, 90)
        saved = api.checkpoint_now(sid)
        live.stop()
        gone = time.monotonic()
        down = api.wait(sid, 30, "the stream noticed the outage", lambda s: s["state"] == "reconnecting")
        noticed_s = time.monotonic() - gone
        time.sleep(max(0.0, pause_s - noticed_s))
        processed = api.stream(sid)["counters"]["processed"]
        live.start()
        back = time.monotonic()
        try:
            up = api.wait(
                sid,
                pause_s + 60,
                "running again",
                lambda s: s["state"] == "running" and s["counters"]["processed"] > processed + 9,
            )
            reconnected = True
        except TimeoutError:
            up, reconnected = api.stream(sid), False
        resumed_s = time.monotonic() - back
        ckpt = torch.load(api.server.checkpoint_dir / f"{name}.pt", map_location="cpu", weights_only=True)
        return {
            "pause_s": pause_s,
            "noticed_s": round(noticed_s, 2),
            "error_while_down": down["error"],
            "reconnected": reconnected,
            "resumed_s": round(resumed_s, 2),
            "reconnects": up["counters"]["reconnects"],
            "reconnects_metric": api.metrics().value("overtime_source_reconnects_total", stream=sid),
            "saved_before": saved,
            "resumed_from": up["resumed_from"],
            "checkpoint_on_disk": int(ckpt["pipeline"]["frames"]),
            "processed": up["counters"]["processed"],
        }
    finally:
        live.stop()
        if sid is not None:
            api.delete(sid)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pause", type=float, default=40.0, help="seconds the source stays away")
    args = parser.parse_args(argv)
    run = Run()
    with tempfile.TemporaryDirectory(prefix="overtime-outage-") as tmp:
        srv = Server(
            Path(tmp),
            settings={
                "OVERTIME_ALLOW_PRIVATE": "true",
                "OVERTIME_CHECKPOINT_INTERVAL_S": "100000",
                "OVERTIME_READ_TIMEOUT_S": "3",
                "OVERTIME_RECONNECT_MAX_S": "5",
            },
        )
        make_video(srv.media_dir / "clip.mp4", frames=90)
        with srv, srv.api() as api:
            result = outage(api, srv.media_dir / "clip.mp4", args.pause, "outage")
    result["ok"] = result["reconnected"] and result["resumed_from"] == result["checkpoint_on_disk"]
    rows = "\n".join(f"| {k} | {v} |" for k, v in result.items())
    run.write("outage", f"Live-source outage ({args.pause:g} s)", f"| | |\n|---|---|\n{rows}", result)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
