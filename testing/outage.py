"""The live-source outage scenario, shared by ``tests/test_faults.py`` (a short pause) and ``bench/outage.py``
(the documented 40 s): one implementation, so the benchmark measures exactly what the test checks."""

from __future__ import annotations

import time
from pathlib import Path

import torch

from testing.api import Api
from testing.sources import LiveSource


def outage(api: Api, video: Path, pause_s: float, name: str) -> dict:
    """Run the scenario on a started server (which must allow loopback sources); the measurements as a dict. The
    stream is deleted at the end, so that nothing of it (a final checkpoint, say) overlaps what runs next."""
    live = LiveSource(video).start()
    sid = None
    try:
        sid = api.create({"source": live.url, "name": name, "fps": 15})["id"]
        api.wait_processed(sid, 20, 90)
        saved = api.checkpoint_now(sid)
        live.stop()
        gone = time.monotonic()
        down = api.wait(sid, 30, "the stream noticed the outage", lambda s: s["state"] == "reconnecting")
        noticed_s = time.monotonic() - gone
        time.sleep(max(0.0, pause_s - noticed_s))
        processed = api.get(sid)["counters"]["processed"]
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
            up, reconnected = api.get(sid), False
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
