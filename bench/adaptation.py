"""What learning while watching buys: the service's adapting learner against its own frozen start, on the same frames.

``python -m bench.adaptation --stream FILE.npz [--shift NAME] --out STEM``: one exact-flow stream (the ``.npz`` of
``models.streams``; ``--shift``: as a camera shift of ``models.camera_shifts`` shows it) scored pair by pair, each
pair before it is learned from, for
- ``frozen``: the shipped ``fast`` net, its weights never changed;
- ``adapting``: the service's learner from those weights (``models.online.learning_for("pretrained")``), sequential;
- ``adapting_d2``: the same learner as a PARTIME pipeline of two stages (the service's D on CPU);
- ``scratch`` (``--scratch``): the learner from random weights, for reference (PARTIME's research setting).
Writes ``STEM.json`` (per learner the end-point error over ``first100``, ``last100`` and ``whole``, and ``per100``,
each 100 pairs in turn; and each pair's), ``STEM.md`` and ``STEM.png`` (adapting / frozen over the stream).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from models.camera_shifts import SHIFTS, shift
from models.flow_metrics import epe
from models.flow_nets import build_flow_net, size_multiple
from models.online import frame_pair, learning_for, online_pipeline, predict_then_learn, shown, stream_pairs
from models.streams import Stream, load_npz
from testing.report import RESULTS, Run

#: The windows every learner is scored over, in pairs.
WINDOW = 100
NET = "fast"


def windows(errors: np.ndarray) -> dict[str, object]:
    """Mean end-point error over the first and last ``WINDOW`` pairs, the whole stream, and each ``WINDOW`` in turn."""
    return {
        "first100": float(errors[:WINDOW].mean()),
        "last100": float(errors[-WINDOW:].mean()),
        "whole": float(errors.mean()),
        "per100": [float(errors[i : i + WINDOW].mean()) for i in range(0, len(errors), WINDOW)],
    }


def frozen_errors(stream: Stream) -> np.ndarray:
    """Each pair's end-point error of the shipped net, never learning."""
    net = build_flow_net(NET, init="pretrained").eval()
    errors = []
    with torch.no_grad():
        for t, x in enumerate(stream_pairs(stream.frames)):
            errors.append(epe(net(x)[0].permute(1, 2, 0).numpy(), stream.flow[t]))
    return np.array(errors)


def learner_errors(stream: Stream, stages: int, init: str, seed: int = 0) -> np.ndarray:
    """Each pair's end-point error of the service's learner that starts ``init``, split into ``stages`` (PARTIME;
    1: sequential), every pair scored before it is learned from (``predict_then_learn``)."""
    torch.manual_seed(seed)
    learning = learning_for(init)
    x0 = frame_pair(stream.frames[0], stream.frames[1])
    pipe = online_pipeline(build_flow_net(NET, init=init), x0, stages, learning=learning,
                           schedule="partime" if stages > 1 else "sequential", devices=["cpu"])  # fmt: skip
    errors = np.full(len(stream.flow), np.nan)
    with pipe:
        for r in predict_then_learn(pipe, stream_pairs(stream.frames), learning.feed(seed)):
            if r.frame is not None and r.output is not None:
                errors[r.frame] = epe(shown(r.output)[0].permute(1, 2, 0).numpy(), stream.flow[r.frame])
    return errors


LEARNERS = {
    "adapting": lambda s: learner_errors(s, 1, "pretrained"),
    "adapting_d2": lambda s: learner_errors(s, 2, "pretrained"),
    "scratch": lambda s: learner_errors(s, 1, "scratch"),
}


def score_stream(stream: Stream, learners: list[str]) -> Iterator[tuple[str, np.ndarray, float]]:
    """(learner, each pair's error, seconds) for the frozen net and each of ``learners``."""
    for name in ["frozen", *learners]:
        start = time.perf_counter()
        errors = frozen_errors(stream) if name == "frozen" else LEARNERS[name](stream)
        yield name, errors, time.perf_counter() - start


def plot(errors: dict[str, np.ndarray], title: str):
    """Each learner's error over the frozen net's, 25-pair running means."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.5))
    kernel = np.ones(25) / 25
    frozen = np.convolve(errors["frozen"], kernel, mode="valid")
    for name, e in errors.items():
        if name != "frozen":
            ax.plot(np.convolve(e, kernel, mode="valid") / frozen, label=f"{name} / frozen")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xlabel("pair (25-pair running mean)")
    ax.set_ylabel("end-point error / frozen's")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def markdown(results: dict[str, dict]) -> str:
    lines = ["| learner | first 100 | last 100 | whole | / frozen first 100 | / frozen last 100 | / frozen whole |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    frozen = results["frozen"]
    for name, r in results.items():
        ratios = " | ".join(f"{r[w] / frozen[w]:.3f}" for w in ("first100", "last100", "whole"))
        lines.append(f"| {name} | {r['first100']:.3f} | {r['last100']:.3f} | {r['whole']:.3f} | {ratios} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stream", required=True, help=".npz of models.streams (frames + exact flow)")
    parser.add_argument("--shift", choices=sorted(SHIFTS), help="the stream as this camera shift shows it")
    parser.add_argument("--out", help="results stem (default bench/results/adaptation/<stream>[-<shift>])")
    parser.add_argument("--scratch", action="store_true", help="also the learner from scratch, for reference")
    parser.add_argument("--frames", type=int, default=0, help="only the first N frames (0: all)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = parser.parse_args(argv)
    try:
        stream = load_npz(args.stream)
    except (OSError, ValueError) as exc:
        parser.error(f"cannot read the stream: {exc}")
    if args.frames:
        stream = Stream(stream.frames[: args.frames], stream.flow[: args.frames - 1])
    multiple = size_multiple(build_flow_net(NET, init="scratch"))
    if len(stream.flow) < 2 or any(side % multiple for side in stream.frames.shape[1:3]):
        parser.error(f"the stream needs >= 3 frames and sides that divide by {multiple}, got {stream.frames.shape}")
    if args.shift:
        stream = shift(stream, args.shift)
    if args.threads:
        torch.set_num_threads(args.threads)
    name = Path(args.stream).stem + (f"-{args.shift}" if args.shift else "")
    out = Path(args.out) if args.out else RESULTS / "adaptation" / name
    run = Run(directory=out.parent)
    learners = ["adapting", "adapting_d2"] + (["scratch"] if args.scratch else [])
    errors, results = {}, {}
    for learner, e, seconds in score_stream(stream, learners):
        errors[learner], results[learner] = e, {**windows(e), "seconds": round(seconds, 1), "pairs": e.tolist()}
        print(f"{learner}: first100 {results[learner]['first100']:.4f} last100 {results[learner]['last100']:.4f} "
              f"whole {results[learner]['whole']:.4f} ({seconds:.0f} s)", file=sys.stderr, flush=True)  # fmt: skip
    size = "x".join(map(str, stream.frames.shape[1:3]))
    title = f"{name}: {len(stream.frames)} frames {size}, net {NET}, end-point error (px), each pair before learning"
    run.png(f"{out.name}.png", plot(errors, title))
    run.write(out.name, title, f"{markdown(results)}\n![adapting / frozen]({out.name}.png)", results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
