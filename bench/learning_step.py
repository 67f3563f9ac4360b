"""Compute per learning step: the service's learner (``online_pipeline``, the ``fast`` net, its shipped weights, each
step the pair shown and a pair of known motion made from it before the step is timed) at a learning size, run in ways
that might make a step cheaper, side by side in one run.

Each way runs in a fresh process (thread settings, environment variables and compile caches cannot leak from one
way into the next) on the same frames from the same weights, and reports how long building took, the warm-up steps
together (where ``torch.compile`` compiles: a stage process after the first compiles at its second step or later), the
steady step's median and 90th percentile, and the loss after the last step (a way that computes something else shows a
different loss). Each compile way runs once with an empty inductor cache (cold); then every way runs in interleaved
rounds, the compile ways on the cache their cold run filled (warm), and keeps its best round, as ``timeit`` does on a
shared machine (the machine's speed drifts by tenths from one minute to the next).

* ``eager-1t`` (the service: one intra-op thread), ``eager-2t``, ``eager-2t-passive`` (OpenMP threads that sleep
  instead of spinning while they wait: ``OMP_WAIT_POLICY=PASSIVE``);
* ``eager-D2``: PARTIME with 2 stages as threads, one intra-op thread each;
* ``processes-D2``: the same with each stage in a process of its own, forked (the service's learner on CPU:
  ``server.stream.learner.learner.stage_runtime``);
* ``adam-loop-1t``: as ``eager-1t`` with torch's default Adam on CPU (a loop over the parameters) instead of the
  service's fused one;
* ``channels-last-1t`` / ``-D2``: the net and its input in channels-last memory format;
* ``plain-convs-1t`` / ``-D2``: every conv in the default memory format, also the narrow ones that the net runs in
  channels-last (``models.flow_nets.ChannelsLastConv2d``): what that choice saves;
* ``tensor-ops-1t`` / ``tensor-ops-processes-D2``: the variational solver, the window products, the fill's weights
  and the order statistics in their reference tensor ops instead of the CPU's own loops (``bench.own_kernels``):
  what those loops save;
* ``compile-1t`` / ``-D2`` / ``-processes-D2``: every stage through ``torch.compile`` (``compile_backend="inductor"``:
  inductor's C++ backend on CPU), cold and warm; in the last each stage process compiles its own stage;
* ``profile-1t`` / ``profile-2t``: not a step but what a new stream's worker does first, profiling the layers for
  the split between 2 stages (``pipeline_core.balance``), with 1 or 2 intra-op threads (its time is "build s").

    python -m bench.learning_step                    # 160x120, writes bench/results/learning-step-cpu.{md,json}
    python -m bench.learning_step --size 128x96 --no-compile --out learning-step-cpu-128x96
    python -m bench.learning_step --quick            # a smoke run (*-quick.*, not committed)
    python -m bench.learning_step --only eager-1t --only compile-1t --out learning-step-cpu-compile
    python -m bench.learning_step --size 128x96 --only eager-1t --only processes-D2 --only compile-1t \
        --only compile-processes-D2 --out learning-step-cpu-128x96-compile
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLAIN = [
    "eager-1t",
    "eager-2t",
    "eager-2t-passive",
    "eager-D2",
    "processes-D2",
    "adam-loop-1t",
    "channels-last-1t",
    "channels-last-D2",
    "plain-convs-1t",
    "plain-convs-D2",
    "tensor-ops-1t",
    "tensor-ops-processes-D2",
]
PROFILES = ["profile-1t", "profile-2t"]
COMPILED = ["compile-1t", "compile-D2", "compile-processes-D2"]
#: How long a compiling way's step may take: its first compiles every stage's forward and backward (minutes cold).
COMPILE_TIMEOUT_S = 1500.0
#: way -> (intra-op threads, stages, extra environment)
WAYS = {
    "eager-1t": (1, 1, {}),
    "eager-2t": (2, 1, {}),
    "eager-2t-passive": (2, 1, {"OMP_WAIT_POLICY": "PASSIVE"}),
    "eager-D2": (2, 2, {}),  # the local runtime gives each of the 2 stages 2 // 2 = 1 thread
    "processes-D2": (2, 2, {}),  # so does the process runtime
    "adam-loop-1t": (1, 1, {}),
    "channels-last-1t": (1, 1, {}),
    "channels-last-D2": (2, 2, {}),
    "plain-convs-1t": (1, 1, {}),
    "plain-convs-D2": (2, 2, {}),
    "tensor-ops-1t": (1, 1, {}),
    "tensor-ops-processes-D2": (2, 2, {}),
    "compile-1t": (1, 1, {}),
    "compile-D2": (2, 2, {}),
    # Each stage process compiles its own stage at its first step, on its own core: one compile worker each.
    "compile-processes-D2": (2, 2, {"TORCHINDUCTOR_COMPILE_THREADS": "1"}),
    "profile-1t": (1, 2, {}),
    "profile-2t": (2, 2, {}),
}


def coarse_then_full(net) -> list[int]:
    """The fast net's D = 2 split at the service's sizes: the coarse levels, then the full-resolution level (which
    keeps together); fixed here because profiling the split is not what is measured."""
    from pipeline_core.partition import keeps_with_next

    first_full = next(i for i, layer in enumerate(net) if keeps_with_next(layer))
    return [first_full, len(net) - first_full]


def plain_convs(net) -> None:
    """Every ``ChannelsLastConv2d`` of ``net`` replaced by a plain ``nn.Conv2d`` with the same weights."""
    from torch import nn

    from models.flow_nets import ChannelsLastConv2d

    for module in list(net.modules()):
        for name, conv in module.named_children():
            if isinstance(conv, ChannelsLastConv2d):
                plain = nn.Conv2d(conv.in_channels, conv.out_channels, conv.kernel_size, padding=conv.padding)
                plain.load_state_dict(conv.state_dict())
                setattr(module, name, plain)


def child(way: str, size: tuple[int, int], steps: int, warmup: int) -> dict:
    """Runs in the fresh process: build, step, time."""
    import numpy as np
    import torch

    from models.flow_nets import build_flow_net
    from models.online import frame_pair, learning_for, online_pipeline
    from models.streams import generate
    from server.stream.learner.learner import STAGE_START_METHOD

    threads, stages, _ = WAYS[way]
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    w, h = size
    if way.startswith("profile"):
        return profile(way, size)
    frames = generate(max(w, h), steps + 1, seed=5).frames[:, :h, :w]
    start = time.perf_counter()
    net = build_flow_net("fast", init="pretrained")
    if way.startswith("plain-convs"):
        plain_convs(net)
    if way.startswith("tensor-ops"):  # forked stage processes inherit the switch
        from bench.own_kernels import use

        use(kernels=False)
    learning = learning_for("pretrained")  # each step the pair shown and a pair of known motion made from it
    feed = learning.feed(0, stages)
    layers = coarse_then_full(net) if stages == 2 else None
    optimizer = learning.optimizer(fused=not way.startswith("adam-loop"))
    processes = "processes" in way
    runtime = {"runtime": "processes", "start_method": STAGE_START_METHOD} if processes else {}
    compiled = "inductor" if way.startswith("compile") else None
    timeout = COMPILE_TIMEOUT_S if compiled else None
    pipe = online_pipeline(net, torch.zeros(1, 6, h, w), stages, learning=learning, layers=layers,
                           optimizer=optimizer, compile_backend=compiled, timeout=timeout, **runtime)  # fmt: skip
    channels_last = way.startswith("channels-last")
    if channels_last:
        for stage in pipe.stages:
            stage.module.to(memory_format=torch.channels_last)
    built = time.perf_counter() - start
    seconds, loss, error = [], None, None
    try:
        for i in range(steps):
            x, target = feed(frame_pair(frames[i], frames[i + 1]))
            if channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            t0 = time.perf_counter()
            r = pipe.step(x, target=target)
            seconds.append(time.perf_counter() - t0)
            loss = r.loss if r.loss is not None else loss
    except Exception as exc:  # a way that fails is a result too
        error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
    finally:
        pipe.close()
    steady = seconds[warmup:]
    return {
        "way": way,
        "threads": threads if stages == 1 else threads // stages,
        "stages": stages,
        "build_s": built,
        "warmup_s": sum(seconds[:warmup]) if seconds else None,
        "steps": len(steady),
        "median_ms": 1e3 * float(np.median(steady)) if steady else None,
        "p90_ms": 1e3 * float(np.percentile(steady, 90)) if steady else None,
        "final_loss": loss,
        "error": error,
    }


def profile(way: str, size: tuple[int, int]) -> dict:
    """What a new stream's worker does before its first step: measure the layers to split the net into 2 stages."""
    import torch

    from models.flow_loss import guarded_flow_loss
    from models.flow_nets import build_flow_net
    from pipeline_core import balance

    w, h = size
    net = build_flow_net("fast", init="pretrained")
    start = time.perf_counter()
    split = balance(net, torch.zeros(1, 6, h, w), 2, ["cpu"], guarded_flow_loss)
    seconds = time.perf_counter() - start
    return {"way": way, "threads": WAYS[way][0], "stages": 2, "build_s": seconds, "warmup_s": None, "steps": 0,
            "median_ms": None, "p90_ms": None, "final_loss": None, "error": None, "split": split}  # fmt: skip


def run_way(way: str, args: argparse.Namespace, cache: Path | None = None) -> dict:
    env = {**os.environ, **WAYS[way][2], "PYTHONPATH": str(ROOT)}
    if cache is not None:
        env["TORCHINDUCTOR_CACHE_DIR"] = str(cache)
    cmd = [sys.executable, "-m", "bench.learning_step", "--child", way, "--size", args.size, "--steps",
           str(args.steps), "--warmup", str(args.warmup)]  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["?"])[-1][:200]
        return {"way": way, "error": f"exit {done.returncode}: {tail}", "wall_s": wall}
    result = json.loads(done.stdout.strip().splitlines()[-1])
    print(json.dumps(result), flush=True)
    return {**result, "wall_s": wall}


def markdown(rows: list[dict], args: argparse.Namespace) -> str:
    base = next(r["median_ms"] for r in rows if r["way"] == "eager-1t")
    lines = [
        f"Learning steps of the `fast` net at {args.size}, {args.steps} steps per way after {args.warmup} warm-up "
        f"steps; best of {args.rounds} interleaved rounds (a compile way's cold run: once, before them). *vs "
        "eager-1t* = eager-1t's median / this way's (> 1: faster). A step here is the pipeline's only, not the "
        "service's whole frame work.",
        "",
        "| way | threads / stage | stages | build s | warm-up s | median ms | p90 ms | vs eager-1t | loss after | "
        "note |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        median = r.get("median_ms")
        speed = f"{base / median:.2f}x" if median else "–"
        cells = [
            r["way"] + (f" ({r['cache']})" if r.get("cache") else ""),
            str(r.get("threads", "–")),
            str(r.get("stages", "–")),
            f"{r['build_s']:.1f}" if r.get("build_s") is not None else "–",
            f"{r['warmup_s']:.1f}" if r.get("warmup_s") is not None else "–",
            f"{median:.1f}" if median else "–",
            f"{r['p90_ms']:.1f}" if r.get("p90_ms") else "–",
            speed,
            f"{r['final_loss']:.5f}" if r.get("final_loss") is not None else "–",
            (r.get("error") or "").replace("|", "/"),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="160x120", help="learning size WxH (default: the service's largest)")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=8)
    p.add_argument("--rounds", type=int, default=2, help="interleaved rounds of the plain ways")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile ways (minutes each, cold)")
    p.add_argument("--quick", action="store_true", help="a smoke run: few steps, one round, no compile")
    p.add_argument("--out", help="results file stem under bench/results/ (default: learning-step-cpu)")
    p.add_argument("--only", action="append", choices=list(WAYS), metavar="WAY",
                   help="run only this way (repeatable; eager-1t, the baseline, always runs)")  # fmt: skip
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    size = tuple(int(v) for v in args.size.lower().split("x"))
    if args.child:
        print(json.dumps(child(args.child, size, args.steps, args.warmup)))
        return 0
    if args.quick:
        args.steps, args.warmup, args.rounds, args.no_compile = 10, 3, 1, True
    from testing.report import Run

    chosen = set(args.only or WAYS) | {"eager-1t"}
    compiled = [] if args.no_compile else [w for w in COMPILED if w in chosen]
    report = Run()
    with contextlib.ExitStack() as stack:
        caches = {w: Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="inductor-"))) for w in compiled}
        cold = [{**run_way(way, args, caches[way]), "cache": "cold"} for way in compiled]
        best: dict[str, dict] = {}
        rounds: list[dict] = []
        for _ in range(args.rounds):
            for way in [w for w in PLAIN if w in chosen] + compiled:
                r = run_way(way, args, caches.get(way)) | ({"cache": "warm"} if way in caches else {})
                rounds.append(r)
                if r.get("median_ms") and (way not in best or r["median_ms"] < best[way]["median_ms"]):
                    best[way] = r
                best.setdefault(way, r)
    rows = [best[way] for way in PLAIN if way in chosen]
    for way in (w for w in PROFILES if w in chosen):  # each once: a start is a single event, not a steady state
        rows.append(run_way(way, args))
    for way, first in zip(compiled, cold, strict=True):
        rows += [first, best[way]]
    stem = (args.out or "learning-step-cpu") + ("-quick" if args.quick else "")
    title = f"Learning step of the fast net at {args.size}: ways to make it cheaper (CPU)"
    report.write(stem, title, markdown(rows, args), {"size": args.size, "rows": rows, "rounds": rounds})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
