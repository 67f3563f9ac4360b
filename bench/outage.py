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
from pathlib import Path

from testing.media import make_video
from testing.outage import outage
from testing.report import Run
from testing.server import small_server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pause", type=float, default=40.0, help="seconds the source stays away")
    args = parser.parse_args(argv)
    run = Run()
    with tempfile.TemporaryDirectory(prefix="overtime-outage-") as tmp:
        srv = small_server(
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
