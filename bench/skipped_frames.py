"""Online learning from scratch when the learner sees only every n-th frame, as a service that drops frames does.

Why: PARTIME's stage h pushes a gradient that is 2(D-1-h) steps old through the graph of its newest frame; when the
learner skips frames, the content has moved further in between, and the stale gradient points the wrong way. The
coarse levels' own loss (deep supervision, ``models.flow_nets``) gives the first stage a gradient of its own frame.
This bench plays the demo clip (``models.streams``, seed 0) for a few loops at each (D, stride) with the fast net's
deep supervision as built and switched off, and reports the median loss per loop (the same pairs in every loop, so
the loops compare) and zero flow's on the same pairs. ``python -m bench.skipped_frames``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

from models.flow_loss import online_loss
from models.flow_nets import build_flow_net
from models.online import BASE_LR, frame_pair, online_pipeline, predict_then_learn
from models.streams import generate
from testing.report import RESULTS, Run, command_line


def loop_losses(size: int, stride: int, loops: int, stages: int, supervised: bool, seed: int) -> dict:
    """Median loss per loop of a learner from scratch fed pairs (t, t+1) for every ``stride``-th t."""
    frames = generate(size=size, frames=300, seed=seed).frames
    starts = range(0, len(frames) - 1, stride)
    pairs = [frame_pair(frames[t], frames[t + 1]) for t in starts]
    torch.manual_seed(seed)
    net = build_flow_net("fast", init="scratch")
    if not supervised:
        for layer in net:
            if hasattr(layer, "supervision"):
                layer.supervision = 0.0
    start = time.perf_counter()
    with online_pipeline(net, pairs[0], stages, BASE_LR) as pipe:
        losses = np.full(len(pairs) * loops, np.nan)
        for r in predict_then_learn(pipe, (p for _ in range(loops) for p in pairs)):
            if r.frame is not None and r.loss is not None:
                losses[r.frame] = r.loss
    zero = [float(online_loss(torch.zeros(1, 2, size, size), p)) for p in pairs]
    per_loop = [float(np.nanmedian(losses[i * len(pairs) : (i + 1) * len(pairs)])) for i in range(loops)]
    return {"stages": stages, "stride": stride, "supervised": supervised, "loops": per_loop,
            "zero_flow": float(np.median(zero)), "seconds": round(time.perf_counter() - start, 1)}  # fmt: skip


def markdown(rows: list[dict], args: argparse.Namespace) -> str:
    lines = [
        f"Demo clip (models.streams seed {args.seed}, {args.size} px, 300 frames), the fast net from scratch at "
        f"BASE_LR, {args.loops} loops; the learner sees the pairs (t, t+1) of every stride-th t. Median loss per loop "
        "(lower is better; zero flow's on the same pairs beside it). Seconds: wall time of the run on this shared "
        "machine, not a speed measurement.",
        "",
        "| D | stride | deep supervision | loss per loop | zero flow | last / first loop | s |",
        "|---:|---:|---|---|---:|---:|---:|",
    ]
    for r in rows:
        loops = ", ".join(f"{v:.4f}" for v in r["loops"])
        lines.append(f"| {r['stages']} | {r['stride']} | {'on' if r['supervised'] else 'off'} | {loops} | "
                     f"{r['zero_flow']:.4f} | {r['loops'][-1] / r['loops'][0]:.2f} | {r['seconds']} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--loops", type=int, default=3)
    parser.add_argument("--strides", default="1,2")
    parser.add_argument("--stages", default="1,2")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (one: stages get one each)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for the results")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    run = Run(command=command_line("bench.skipped_frames", argv), directory=args.out)
    rows = [
        loop_losses(args.size, stride, args.loops, stages, supervised, args.seed)
        for stride in (int(s) for s in args.strides.split(","))
        for stages in (int(d) for d in args.stages.split(","))
        for supervised in (True, False)
    ]
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    run.write("skipped-frames", "Learning from scratch on skipped frames: PARTIME and deep supervision",
              markdown(rows, args), {"args": settings, "rows": rows})  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
