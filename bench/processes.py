"""Process runtime benchmark: PARTIME's pixel-wise network (Table I), learning, on this machine's CPUs.

Four ways to run the same network on the same cores, measured in one run, in interleaved rounds.
The machine is shared: other load only ever slows a way down, so (as ``timeit`` does) the report
keeps each way's best round, and every round in the JSON:

* ``seq-1t``: the plain loop (a 1-stage pipeline), 1 intra-op thread;
* ``seq-2t``: the plain loop with the machine's threads (intra-op parallelism);
* ``local-D2``: PARTIME with 2 stages as threads of one process (``runtime="local"``);
* ``procs-D2``: PARTIME with 2 stages as 2 processes over gloo (``runtime="processes"``).

Stages are balanced with ``pipeline_core.balance``. Targets: procs-D2 >= 1.8x seq-1t and
>= 1.2x seq-2t. Writes ``bench/results/processes-cpu.json`` and ``.md``.

    python -m bench.processes            # 64x64 and 128x128
    python -m bench.processes --quick    # a short smoke run
"""

from __future__ import annotations

import argparse
import collections
import functools
import statistics
import time

import torch

from bench.engine import square_loss
from models.paper_nets import pixelwise
from pipeline_core import Pipeline, balance
from testing.report import Run

WAYS = ["seq-1t", "seq-2t", "local-D2", "procs-D2"]
TARGETS = {"procs-D2 / seq-1t": 1.8, "procs-D2 / seq-2t": 1.2}


def timed(pipe: Pipeline, x: torch.Tensor, frames: int) -> tuple[float, list[float], float]:
    """Frames/s, each stage's mean busy seconds and the mean step seconds over ``frames`` steps."""
    results = []
    start = time.perf_counter()
    for _ in range(frames):
        results.append(pipe.step(x))
    fps = frames / (time.perf_counter() - start)
    stages = [statistics.mean(r.stage_seconds[h] or 0.0 for r in results) for h in range(pipe.depth)]
    return fps, stages, statistics.mean(r.step_seconds for r in results)


def measure(res: int, args: argparse.Namespace) -> dict:
    cores = torch.get_num_threads()
    torch.manual_seed(0)
    model = pixelwise(args.layers, 32, 1)
    x = torch.rand(1, 3, res, res)
    opt = functools.partial(torch.optim.SGD, lr=1e-6)  # tiny: the net stays stable for any length
    # balance() profiles every layer; on a shared machine one profile can be skewed by a burst of
    # load, so the split is the majority of three (or given with --balance).
    votes = collections.Counter(tuple(balance(model, x, 2, ["cpu"], square_loss)) for _ in range(3))
    split = args.balance or list(votes.most_common(1)[0][0])
    kw = dict(loss_fn=square_loss, optimizer=opt)
    pipes = {
        "seq-1t": Pipeline(model, x, stages=1, **kw),
        "seq-2t": Pipeline(model, x, stages=1, **kw),
        "local-D2": Pipeline(model, x, balance=split, **kw),
        "procs-D2": Pipeline(model, x, balance=split, runtime="processes", **kw),
    }
    threads = {"seq-1t": 1, "seq-2t": cores, "local-D2": cores, "procs-D2": cores}
    fps: dict[str, list[float]] = {w: [] for w in WAYS}
    detail: dict[str, dict] = {}
    try:
        for pipe in pipes.values():
            for _ in range(6):  # fill, warm caches and allocators
                pipe.step(x)
        for _ in range(args.rounds):
            for way in WAYS:
                torch.set_num_threads(threads[way])
                f, stages, step = timed(pipes[way], x, args.frames)
                fps[way].append(f)
                detail[way] = {"stage_seconds": stages, "step_seconds": step}
            print(f"  {res}x{res} round: " + ", ".join(f"{w} {fps[w][-1]:.2f}" for w in WAYS), flush=True)
    finally:
        torch.set_num_threads(cores)
        for pipe in pipes.values():
            pipe.close()
    best = {w: max(v) for w, v in fps.items()}
    ratios = {
        "procs-D2 / seq-1t": best["procs-D2"] / best["seq-1t"],
        "procs-D2 / seq-2t": best["procs-D2"] / best["seq-2t"],
        "local-D2 / seq-1t": best["local-D2"] / best["seq-1t"],
        "seq-2t / seq-1t": best["seq-2t"] / best["seq-1t"],
    }
    return {"R": res, "balance": split, "fps": best, "fps_rounds": fps, "ratios": ratios, "detail": detail}


def markdown(report: dict) -> str:
    lines = [
        f"{report['layers']}-layer pixel-wise network (5x5 convs, 32 channels, F=1), learning (SGD), on "
        f"{report['cores']} cores; best of {report['rounds']} interleaved rounds of {report['frames']} frames.",
        "",
        "| R | balance | seq 1 thread | seq 2 threads | local D=2 | processes D=2 | procs/seq-1t (>= 1.8) "
        "| procs/seq-2t (>= 1.2) | local/seq-1t | seq-2t/seq-1t |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in report["rows"]:
        f, r = row["fps"], row["ratios"]
        lines.append(
            f"| {row['R']} | {row['balance']} | "
            + " | ".join(f"{f[w]:.2f}" for w in WAYS)
            + " | "
            + " | ".join(f"{r[k]:.2f}" for k in r)
            + " |"
        )
    lines += ["", "frames/s; per-stage busy time and step time (s) of the last round:", ""]
    for row in report["rows"]:
        for way in ("local-D2", "procs-D2"):
            d = row["detail"][way]
            stages = ", ".join(f"{s:.4f}" for s in d["stage_seconds"])
            lines.append(f"- {row['R']}x{row['R']} {way}: stages [{stages}], step {d['step_seconds']:.4f}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--resolutions", type=lambda s: [int(v) for v in s.split(",")], default=[64, 128])
    parser.add_argument("--layers", type=int, default=8, help="conv layers (paper: 150)")
    parser.add_argument("--frames", type=int, default=12, help="timed frames per way and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--balance", type=lambda s: [int(v) for v in s.split(",")], help="layers per stage")
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    args = parser.parse_args(argv)
    if args.quick:
        args.resolutions, args.layers, args.frames, args.rounds = [32], 4, 5, 1
    run = Run()
    report = {"cores": torch.get_num_threads(), "layers": args.layers, "frames": args.frames, "rounds": args.rounds}
    print(f"pixel-wise net, {args.layers} layers, load {run.load_before}", flush=True)
    report["rows"] = [measure(res, args) for res in args.resolutions]
    for row in report["rows"]:
        for name, target in TARGETS.items():
            verdict = "met" if row["ratios"][name] >= target else "MISSED"
            print(f"{row['R']}x{row['R']}: {name} = {row['ratios'][name]:.2f} (target {target}) {verdict}")
    suffix = "-quick" if args.quick else ""
    run.write(f"processes-cpu{suffix}", "Process runtime benchmark (CPU)", markdown(report), report)


if __name__ == "__main__":
    main()
