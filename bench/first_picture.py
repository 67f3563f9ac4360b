"""How soon a freshly started ``overtime serve`` shows a stream's first picture, against another checkout's server.

What a user waits for after ``overtime serve`` (or ``make run``, whose demo stream starts with the server): the
server answering, then a stream asked for at once showing its first picture. Each run starts a server with an empty
cache folder on a small generated clip (its fork server not started), waits for ``/healthz``, posts the stream and
opens a viewer; times are from the server's start. With ``--against``, the other checkout's server (its own code,
this interpreter and packages) runs in turns with this one's, so both meet the machine's same moods; the table says
the medians and this checkout's over the other's.

    python -m bench.first_picture                                    # this checkout alone: first-picture.*
    git worktree add ../before HEAD~1 && python -m bench.first_picture --against ../before --label "before"
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.service_clip import start_stream
from testing.media import make_video
from testing.report import RESULTS, Run
from testing.server import ROOT, ServerProcess

CLIP_FRAMES, CLIP_SIZE, CLIP_FPS = 90, 128, 15


def revision(checkout: Path) -> str:
    done = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or "?"


def check_imports_from(checkout: Path) -> None:
    """The server a run starts must be the checkout's own, not the package this interpreter has installed."""
    code = "import server, sys; sys.stdout.write(server.__file__)"
    done = subprocess.run([sys.executable, "-c", code], cwd=checkout, capture_output=True, text=True)
    if done.returncode != 0 or not Path(done.stdout).resolve().is_relative_to(checkout.resolve()):
        found = done.stdout or "nowhere (it cannot import it)"
        raise SystemExit(f"bench.first_picture: in {checkout} this interpreter imports server from {found}")


def one_start(checkout: Path, clip: Path) -> dict:
    """A fresh server of ``checkout`` and one stream of ``clip``: seconds from the start to each milestone."""
    with tempfile.TemporaryDirectory(prefix="overtime-first-") as tmp:
        work = Path(tmp)
        (work / "media").mkdir()
        (work / "media" / clip.name).write_bytes(clip.read_bytes())
        srv = ServerProcess(work, "--no-demo-stream", checkout=checkout)
        t0 = time.monotonic()
        with srv:
            healthy = time.monotonic() - t0
            _, after_post = start_stream(srv, {"source": f"file:{clip.name}", "loop": True})  # posted at once
    return {"healthy_s": round(healthy, 3), "first_picture_s": round(healthy + after_post, 3)}


def summary(runs: list[dict]) -> dict:
    return {key: {"median": statistics.median(r[key] for r in runs), "min": min(r[key] for r in runs),
                  "max": max(r[key] for r in runs)} for key in ("healthy_s", "first_picture_s")}  # fmt: skip


def markdown(result: dict) -> str:
    lines = [
        f"A generated clip ({CLIP_SIZE}x{CLIP_SIZE}, {CLIP_FPS} fps), each run a fresh server with an empty cache "
        f"folder; {result['rounds']} runs per checkout, in turns. Seconds from the server's start: median (min-max).",
        "",
        "| checkout | revision | answering /healthz | a stream's first picture |",
        "|---|---|---|---|",
    ]
    for row in result["checkouts"]:
        s = row["summary"]
        cells = [f"{s[k]['median']:.2f} ({s[k]['min']:.2f}-{s[k]['max']:.2f})" for k in s]
        lines.append(f"| {row['label']} | {row['revision']} | {cells[0]} | {cells[1]} |")
    if "first_picture_ratio" in result:
        this, other = (row["label"] for row in result["checkouts"])
        lines += ["", f"First picture, {this} / {other} (medians): **{result['first_picture_ratio']:.2f}**."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--against", type=Path, default=None, help="another checkout (a git worktree) to run in turns")
    p.add_argument("--label", default="other", help="what to call the other checkout in the table")
    p.add_argument("--rounds", type=int, default=5, help="runs per checkout")
    p.add_argument("--out", type=Path, default=RESULTS, help="folder for the results")
    args = p.parse_args(argv)
    checkouts = [("this checkout", ROOT)] + ([(args.label, args.against)] if args.against else [])
    for _, checkout in checkouts:
        check_imports_from(checkout)
    report = Run(directory=args.out)
    runs: dict[str, list[dict]] = {label: [] for label, _ in checkouts}
    with tempfile.TemporaryDirectory(prefix="overtime-first-clip-") as tmp:
        clip = make_video(Path(tmp) / "clip.mp4", frames=CLIP_FRAMES, size=CLIP_SIZE, fps=CLIP_FPS)
        for i in range(args.rounds):
            for label, checkout in checkouts:
                runs[label].append(one_start(checkout, clip))
                print(f"round {i + 1}, {label}: {runs[label][-1]}", flush=True)
    result = {"rounds": args.rounds, "checkouts": [
        {"label": label, "revision": revision(checkout), "runs": runs[label], "summary": summary(runs[label])}
        for label, checkout in checkouts]}  # fmt: skip
    if args.against:
        this, other = (row["summary"]["first_picture_s"]["median"] for row in result["checkouts"])
        result["first_picture_ratio"] = round(this / other, 3)
    title = "How soon a fresh server shows a stream's first picture (CPU)"
    report.write("first-picture", title, markdown(result), result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
