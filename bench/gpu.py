"""``make bench-gpu``: the service on a GPU, measured by one command that ends within 6 minutes, into
``bench/results/gpu-<card>.{md,json}``.

Parts, each reported even when another fails, in the order ``--parts`` names them; the report is written again after
each part, so a run stopped at its time limit keeps what it measured:

1. **CUDA tests**: ``pytest -m cuda`` (the engine against its references on CUDA streams and graphs, the flow nets
   in a graph against eager, the device transfers).
2. **The learning step per size** (``bench.gpu_step``): eager and graph (what the service runs); with ``--compiled``
   also compiled and compiled + graph (``--gpu-compile``, off in the service: a cold compile took minutes on an H200,
   seen in the first run, whose report the time limit cut off); kernels, launches and host syncs per step, and where
   the largest size's step as a graph spends its device time, by kernel.
3. **Learners sharing the GPU** (``bench.gpu_streams``): processes, processes under MPS, threads on CUDA streams.
4. **The service** on ``box.mp4`` at its own rate (30 fps), sizes left to the service: the learning sizes and changes,
   drops and latency p95 over a window, first picture cold and warm (``bench.service_clip``'s measures); then
   ``--service-streams`` streams of it at once: drops and frames learned per second in all. Under NVIDIA MPS where
   the machine has it (each stream's learner is a process of its own: without MPS they time-slice the GPU).

On a GPU machine without the service's packages (fastapi, starlette, pydantic, pydantic-core, pydantic-settings,
uvicorn, av, websockets, ...), bring them as wheels: here, ``make gpu-wheels`` downloads CPython 3.12 manylinux
wheels into ``.whl/`` (``pip download --only-binary=:all: --python-version 3.12 --no-deps ...``); there,
``pip install --no-index --no-deps --target /tmp/site .whl/*.whl`` and ``PYTHONPATH=/tmp/site``. Copy the clip into
``.clips/`` (git-ignored) to carry it. Part 4 is skipped, saying so, when the packages or the clip are missing.

    python -m bench.gpu                       # on a GPU: gpu-<card>.md in bench/results/
    python -m bench.gpu --device cpu --quick --out-dir DIR    # the suite's smoke run of every part's code
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from bench import gpu_step, gpu_streams
from server.stream.sizing import parse_size
from testing.report import RESULTS, Run

#: Not testing.server's: parts 1-3 run on GPU machines that lack the service's packages, which that module imports.
ROOT = Path(__file__).resolve().parent.parent

CLIPS = (ROOT.parent / "shared" / "clips" / "box.mp4", ROOT / ".clips" / "box.mp4")
SERVICE_PACKAGES = ("fastapi", "starlette", "pydantic", "pydantic_settings", "uvicorn", "av", "websockets")


def card_name(device: str) -> str:
    """``gpu-nvidia-h100-80gb-hbm3``; ``gpu-cpu`` for the smoke run."""
    name = torch.cuda.get_device_name(device) if device.startswith("cuda") else "cpu"
    return "gpu-" + re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def cuda_tests(args: argparse.Namespace) -> dict:
    if not args.device.startswith("cuda"):
        return {"skipped": "no CUDA device: the CUDA tests skip themselves in the suite"}
    # Only the files that hold CUDA tests: collecting the others needs packages a GPU machine may lack (Ray, ...).
    files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_*.py") if "mark.cuda" in p.read_text())
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "cuda", "-p", "no:cacheprovider", *files]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=args.tests_timeout)
    lines = done.stdout.strip().splitlines()
    failures = [line for line in lines if line.startswith(("FAILED", "ERROR"))]
    summary = lines[-1] if lines else done.stderr[-500:]
    print(summary, *failures, sep="\n", flush=True)
    return {"returncode": done.returncode, "summary": summary, "failures": failures}


def steps(args: argparse.Namespace) -> dict:
    device = torch.device(args.device)
    if device.type == "cuda":
        plan = [(way, size, 1) for size in args.sizes for way in ("eager", "graph")] + [("graph", args.sizes[-1], 2)]
        if args.compiled:  # compiled + graph first: it decides whether compiling pays where graphs removed the launches
            plan += [(way, args.sizes[-1], stages) for stages in (1, 2) for way in ("compiled+graph", "compiled")]
    else:
        plan = [("eager", size, 1) for size in args.sizes]
    rows, errors = [], []
    deadline = time.monotonic() + args.steps_budget_s
    for way, size, stages in plan:
        if time.monotonic() > deadline:
            errors.append(f"{way} {size[0]}x{size[1]} D={stages}: not measured, the part's {args.steps_budget_s:g} s "
                          "were spent")  # fmt: skip
            continue
        try:
            rows.append(gpu_step.measure(way, size, stages, device, args.step_count, args.rounds))
            print(gpu_step.table(rows[-1:])[-1], flush=True)
        except Exception as exc:
            errors.append(f"{way} {size[0]}x{size[1]} D={stages}: {type(exc).__name__}: {exc}")
            print(errors[-1], flush=True)
    return {"rows": [gpu_step.as_dict(r) for r in rows], "table": gpu_step.table(rows), "errors": errors}


def streams(args: argparse.Namespace) -> dict:
    ways = gpu_streams.WAYS if args.device.startswith("cuda") else ("processes", "threads")
    rows = []
    for way in ways:
        try:
            rows.append(gpu_streams.measure(way, args.learners, args.sizes[-1], args.device, args.stream_seconds))
        except Exception as exc:
            rows.append({"way": way, "learners": args.learners, "size": list(args.sizes[-1]),
                         "error": f"{type(exc).__name__}: {exc}"})  # fmt: skip
        print(gpu_streams.table(rows[-1:])[-1], flush=True)
    return {"rows": rows, "table": gpu_streams.table(rows)}


def service(args: argparse.Namespace) -> dict:
    missing = [p for p in SERVICE_PACKAGES if importlib.util.find_spec(p) is None]
    if missing:
        return {"skipped": f"the service's packages are missing here ({', '.join(missing)}): see this module's "
                           "docstring (make gpu-wheels)"}  # fmt: skip
    clip = args.clip or (None if args.quick else next((c for c in CLIPS if c.is_file()), None))
    if clip is None and not args.quick:
        return {"skipped": f"no clip: copy box.mp4 into {CLIPS[1].parent}"}
    with tempfile.TemporaryDirectory(prefix="overtime-gpu-") as work:
        return _service_in(Path(work), clip, args)


def _service_in(work: Path, clip: Path | None, args: argparse.Namespace) -> dict:
    """The service part in ``work`` (its media, checkpoints and log; removed after the run)."""
    from bench import service_clip
    from testing.media import make_video
    from testing.server import ServerProcess

    (work / "media").mkdir()
    if clip is None:  # the smoke run: a small generated clip
        clip = make_video(work / "media" / "generated.mp4", frames=60, size=64, fps=10)
    else:
        shutil.copy(clip, work / "media" / clip.name)
    body = {"source": f"file:{clip.name}", "loop": True}
    result: dict = {"clip": clip.name}
    flags = ["--no-demo-stream", "--max-streams", str(max(args.service_streams, 4))]
    mps = args.device.startswith("cuda") and shutil.which("nvidia-cuda-mps-control") is not None
    result["mps"] = mps
    with gpu_streams.mps_daemon() if mps else contextlib.nullcontext(), ServerProcess(work, *flags) as srv:
        sid, result["first_picture_cold_s"] = service_clip.start_stream(srv, {**body, "name": "gpu-cold"})
        result["one_stream"] = asyncio.run(service_clip.window(srv, sid, args.warmup, args.seconds))
        result["window_s"] = {"one": args.seconds, "many": args.many_seconds}
        result["one_stream"]["met"] = service_clip.verdict(result["one_stream"])
        srv.client.delete(f"/api/streams/{sid}")
        warm = []
        for i in range(args.starts):
            sid, seconds = service_clip.start_stream(srv, {**body, "name": f"gpu-warm-{i}"})
            warm.append(seconds)
            srv.client.delete(f"/api/streams/{sid}")
        result["first_picture_warm_s"] = warm
        sids = [service_clip.start_stream(srv, {**body, "name": f"gpu-many-{i}"})[0]
                for i in range(args.service_streams)]  # fmt: skip
        result["many_streams"] = asyncio.run(many(srv, sids, args.warmup, args.many_seconds))
        for row in result["many_streams"]:
            row["met"] = service_clip.verdict(row)
    return result


async def many(srv, sids: list[str], warmup_s: float, seconds: float) -> list[dict]:
    from bench import service_clip

    return list(await asyncio.gather(*(service_clip.window(srv, sid, warmup_s, seconds) for sid in sids)))


def markdown(result: dict, args: argparse.Namespace) -> str:
    sections = [
        ("1. CUDA tests", "cuda_tests", _tests_lines),
        ("2. The learning step (`fast` net, shipped weights)", "steps", _steps_lines),
        (f"3. {args.learners} learners sharing the device", "streams", lambda part: part["table"]),
        ("4. The service", "service", lambda part: _service_lines(part, args)),
    ]
    lines = [f"Device {args.device}; {result['seconds']:.0f} s in all."]
    for title, name, body in sections:
        part = result.get(name, {"skipped": "not reached yet (the run was stopped before this part)"})
        said = _said(part)
        lines += ["", f"## {title}", "", *([said] if said else body(part))]
    return "\n".join(lines) + "\n"


def _tests_lines(part: dict) -> list[str]:
    return [f"`pytest -m cuda`: {part['summary']}", *[f"- {failure}" for failure in part["failures"]]]


def _steps_lines(part: dict) -> list[str]:
    """The table of steps, and where the largest size's step as a graph spends its device time (as the service runs
    it: what to make cheaper)."""
    graphs = [r for r in part["rows"] if r["way"] == "graph" and r["stages"] == 1 and r["top_kernels"]]
    largest = max(graphs, key=lambda r: r["size"][0] * r["size"][1], default=None)
    where = ["", *gpu_step.kernel_table(largest)] if largest else []
    return [*part["table"], *[f"- {error}" for error in part["errors"]], *where]


def _service_lines(part: dict, args: argparse.Namespace) -> list[str]:
    one, many_rows, warm = part["one_stream"], part["many_streams"], part["first_picture_warm_s"]
    steps_per_s = sum(r["frames"] for r in many_rows) / part["window_s"]["many"]
    return [
        f"`{part['clip']}` looping at its own rate, sizes by the service (D = {one['stages']}), "
        f"{'under' if part['mps'] else 'without'} NVIDIA MPS:",
        "",
        "| streams | learning sizes | changes of size | frames | dropped | work mean / p95 ms | ΔP mean ms "
        "| latency p95 / target ms | met |",
        "|---:|---|---:|---:|---:|---|---:|---|---|",
        _service_row(1, one),
        _service_row(len(many_rows), merge(many_rows)),
        "",
        f"First picture: cold {part['first_picture_cold_s']:.1f} s, warm {', '.join(f'{s:.1f}' for s in warm)} s. "
        f"{len(many_rows)} streams at once: {steps_per_s:.0f} frames learned per second in all; budget note of the "
        f"first: “{many_rows[0]['budget_note']}”.",
    ]


def merge(rows: list[dict]) -> dict:
    """Several streams' windows as one row: sums of frames and drops, the worst of the rest."""
    worst = lambda key: max(r[key] for r in rows)  # noqa: E731
    sizes = sorted({tuple(s) for r in rows for s in r["learning_sizes"]}, reverse=True)
    return {"learning_sizes": [list(s) for s in sizes], "size_changes": sum(r["size_changes"] for r in rows),
            "frames": sum(r["frames"] for r in rows),
            "dropped": sum(r["dropped"] for r in rows), "work_mean_s": worst("work_mean_s"),
            "work_p95_s": worst("work_p95_s"), "dp_mean_s": worst("dp_mean_s"),
            "latency_p95_s": worst("latency_p95_s"), "latency_target_s": rows[0]["latency_target_s"],
            "met": all(r["met"] for r in rows)}  # fmt: skip


def _service_row(n: int, r: dict) -> str:
    sizes = ", ".join(f"{w}×{h}" for w, h in r["learning_sizes"])
    met = "yes" if r["met"] else "no"
    return (f"| {n} | {sizes} | {r['size_changes']} | {r['frames']} | {r['dropped']} | {r['work_mean_s'] * 1e3:.1f} / "
            f"{r['work_p95_s'] * 1e3:.1f} | {r['dp_mean_s'] * 1e3:.1f} | {r['latency_p95_s'] * 1e3:.0f} / "
            f"{r['latency_target_s'] * 1e3:.0f} | {met} |")  # fmt: skip


def _said(part: dict) -> str | None:
    """What a part said instead of measuring (skipped, or failed)."""
    if "skipped" in part:
        return f"Skipped: {part['skipped']}."
    if "error" in part:
        return f"Failed: {part['error']}"
    return None


PARTS = {"cuda_tests": cuda_tests, "steps": steps, "streams": streams, "service": service}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--sizes", type=parse_size, nargs="+", default=[(160, 120), (320, 240), (640, 480)])
    p.add_argument("--clip", type=Path, default=None, help="default: ../shared/clips/box.mp4, else .clips/box.mp4")
    p.add_argument("--learners", type=int, default=8, help="learners sharing the device in part 3")
    p.add_argument("--service-streams", type=int, default=8, help="streams at once in part 4")
    p.add_argument("--quick", action="store_true", help="the suite's smoke run: tiny sizes, seconds-long windows")
    p.add_argument("--out-dir", type=Path, default=RESULTS)
    p.add_argument("--parts", nargs="+", choices=list(PARTS), default=list(PARTS), help="run in this order")
    p.add_argument("--window-s", type=float, default=60.0,
                   help="part 4: one stream's window; many streams' is half, each warm-up a quarter")  # fmt: skip
    p.add_argument("--compiled", action="store_true", help="part 2 also measures compiled stages (minutes more)")
    p.add_argument("--steps-budget-s", type=float, default=150.0, help="part 2 starts nothing new after this")
    args = p.parse_args(argv)
    # Sized to end within 6 minutes on a GPU (a session has 15, its start included): tests under 1 min, steps under
    # 150 s (a compile in flight runs on: --compiled adds minutes), learners ~1 min, service ~3 min.
    args.step_count, args.rounds, args.stream_seconds, args.tests_timeout = 30, 3, 10.0, 150
    args.seconds, args.many_seconds, args.warmup, args.starts = args.window_s, args.window_s / 2, args.window_s / 4, 2
    if args.quick:
        args.sizes, args.learners, args.service_streams = [(64, 48)], 2, 2
        args.step_count, args.rounds, args.stream_seconds = 3, 1, 1.0
        args.seconds, args.many_seconds, args.warmup, args.starts = 1.5, 1.5, 0.5, 1
    report, start = Run(directory=args.out_dir), time.perf_counter()
    result: dict = {name: {"skipped": "not asked for (--parts)"} for name in PARTS if name not in args.parts}
    title = f"The service on a GPU ({args.device}{', smoke run' if args.quick else ''})"
    for name in dict.fromkeys(args.parts):
        print(f"== {name}", flush=True)
        try:
            result[name] = PARTS[name](args)
        except Exception as exc:  # one part failing must not cost the others' results
            result[name] = {"error": f"{type(exc).__name__}: {exc}"}
            print(result[name]["error"], flush=True)
        result["seconds"] = time.perf_counter() - start
        report.write(card_name(args.device), title, markdown(result, args), result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
