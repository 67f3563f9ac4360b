"""Memory of the schedules: stash's input FIFOs and GPipe with and without checkpointing.

CPU tensors have no allocator statistics in PyTorch, so each configuration runs in a fresh
process and reports its peak resident memory (``ru_maxrss``) above what it held once the pipeline
was built: the peak of activations, stashes, gradients and messages while learning. glibc is told
to map every block of 64 KiB or more on its own (``MALLOC_MMAP_THRESHOLD_``), so a freed tensor
leaves the resident set at once instead of staying cached in a per-thread arena. Stash's FIFOs
are also counted exactly (entries and bytes per stage, between steps). SGD without momentum keeps
optimizer state out of the numbers. Writes ``bench/results/memory.{json,md}``.

    python -m bench.memory
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys

import torch

from models.paper_nets import pixelwise
from pipeline_core import Pipeline
from pipeline_core.partition import equal_balance
from pipeline_core.schedules import GPipe
from testing.report import Run

CONFIGS = [
    ("sequential", None),
    ("partime", None),
    ("stash", None),
    ("gpipe", "never"),
    ("gpipe", "except_last"),
    ("gpipe", "always"),
    ("cdp-v2", None),
]


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def measure(args: argparse.Namespace, name: str, checkpoint: str | None) -> dict:
    """One configuration, in this (fresh) process."""
    torch.manual_seed(0)
    model = pixelwise(args.layers, args.channels, 1)
    x = torch.rand(args.batch, 3, args.size, args.size)
    schedule = GPipe(args.stages, chunks=args.chunks, checkpoint=checkpoint) if name == "gpipe" else name
    with Pipeline(
        model,
        x,
        balance=equal_balance(len(model), args.stages),
        loss_fn=lambda out, _t: out.pow(2).mean(),
        optimizer=lambda p: torch.optim.SGD(p, lr=1e-9),
        schedule=schedule,
    ) as pipe:
        base = peak_mib()
        for _ in range(args.steps):
            pipe.step(x)
        stash = [
            {"entries": len(s.stash), "MiB": sum(t.numel() * t.element_size() for t in s.stash.values()) / 2**20}
            for s in pipe.stages
        ]
        pipe.flush()
    label = name if checkpoint is None else f"gpipe ({checkpoint})"
    return {"schedule": label, "peak_MiB_above_built": peak_mib() - base, "stash_per_stage": stash}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stages", type=int, default=4)
    parser.add_argument("--chunks", type=int, default=4)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--channels", type=int, default=32)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: measure one configuration
    args = parser.parse_args(argv)
    if args.one:
        name, _, checkpoint = args.one.partition(":")
        print(json.dumps(measure(args, name, checkpoint or None)))
        return
    run = Run()
    rows = []
    forwarded = list(argv if argv is not None else sys.argv[1:])
    for name, checkpoint in CONFIGS:
        one = f"{name}:{checkpoint or ''}"
        out = subprocess.run(
            [sys.executable, "-m", "bench.memory", *forwarded, "--one", one],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "MALLOC_MMAP_THRESHOLD_": str(64 * 1024)},
        )
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(rows[-1]["schedule"], f"{rows[-1]['peak_MiB_above_built']:.0f} MiB", flush=True)
    act = args.batch * args.channels * args.size * args.size * 4 / 2**20
    lines = [
        f"{args.layers}-layer pixel-wise net, {args.channels} channels, batch {args.batch} at {args.size}x{args.size} "
        f"(one layer's activation: {act:.1f} MiB), D={args.stages}, GPipe chunks={args.chunks}, {args.steps} steps.",
        "",
        "| schedule | peak MiB above built | stash entries per stage (between steps) | stash MiB per stage |",
        "|---|---|---|---|",
    ]
    for r in rows:
        entries = ", ".join(str(s["entries"]) for s in r["stash_per_stage"])
        mib = ", ".join(f"{s['MiB']:.1f}" for s in r["stash_per_stage"])
        lines.append(f"| {r['schedule']} | {r['peak_MiB_above_built']:.0f} | {entries} | {mib} |")
    run.write("memory", "Schedule memory (CPU, peak RSS above the built pipeline)", "\n".join(lines), {
        "config": vars(args), "rows": rows})  # fmt: skip


if __name__ == "__main__":
    main()
