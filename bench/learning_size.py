"""Which size the service's net should learn at when the picture is larger than the size the net was made for (a GPU
learns at the picture's own: every size costs it about the same), scored on the picture's grid.

Three online learners of the shipped weights, sequential, each pair scored before it is learned (as
``bench.realflow``, whose clip loading, pseudo ground truth and scores this uses):

- **at the CPU's size**: always at the CPU's largest learning size (``made_for_side``), its flow scaled up to the
  picture's size;
- **at the picture's size**: what a GPU learned at before the motion cap;
- **capped**: the size the service's motion cap allows (``server.stream.learner.reach.MotionCap``, fed each pair's
  flow; its clock is the clip's), flow scaled up. One learner whose size changes from pair to pair, as the service's
  does (it rebuilds with the same weights), without the frames a rebuild costs there.

Farneback, DIS-fast and zero flow at the picture's size beside them. The learners run where the service's would (on
a GPU when there is one, as CUDA graphs). → ``bench/results/learning-size-<clip>-<W>x<H>.{md,json}``.

    python -m bench.learning_size --video ../shared/clips/tree.avi [--size 320x240]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
import torch

from bench.realflow import (
    MAX_FPS,
    build_learner,
    initial_net,
    load_clip,
    parse_size,
    probe,
    run_references,
    working_size,
)
from bench.realflow_scores import WINDOWS, Clip, PairScores
from models.classical import resize_flow
from models.feeds import shown
from models.online import default_lr, frame_pair, learning_for, online_pipeline
from models.scene_cuts import SceneCuts
from server.stream.learner.reach import MotionCap
from server.stream.sizing import Size, fit, learning_ladder, made_for_side
from testing.report import Run, command_line

COLUMNS = ("epe_all", "epe_moving", "epe_fast", "epe_moving_consistent", "epe_fast_consistent")


def scaled(frames: np.ndarray, t: int, size: Size, cut: bool = False) -> torch.Tensor:
    """Pair t at ``size``, scaled as the service scales the picture (``FrameLoop.scaled``); at a scene ``cut`` the
    second frame paired with itself, as the service pairs it (``models.online.stream_pairs``)."""
    a, b = (cv2.resize(f, size, interpolation=cv2.INTER_AREA) for f in frames[t : t + 2])
    return frame_pair(b if cut else a, b)


def learn(
    clip: Clip, size_of: Callable[[int], Size], on_flow: Callable[[int, np.ndarray], None] | None = None
) -> PairScores:
    """One sequential pass over the clip, pair t learned at ``size_of(t)``; on a change of size the pipeline is rebuilt
    with the same weights and optimizer state (as ``Learner.resize``); flows scaled up to the picture's size."""
    height, width = clip.frames.shape[1:3]
    scores = PairScores(clip, set())
    size = size_of(0)
    model, sample = initial_net("pretrained", "fast", 0), scaled(clip.frames, 0, size)
    pipe = build_learner(model, "pretrained", sample, 1, default_lr("pretrained"))
    feed = learning_for("pretrained").feed()
    cuts = SceneCuts()
    cuts(clip.frames[0])
    try:
        for t in range(len(clip.pseudo_gt)):
            x = scaled(clip.frames, t, size_of(t), cuts(clip.frames[t + 1]))
            if size_of(t) != size:
                size, state, module = size_of(t), pipe.state_dict(), pipe.module()
                pipe.close()
                pipe = online_pipeline(module, x, 1, learning=learning_for("pretrained"))
                pipe.load_state_dict(state)
            result = pipe.step(*feed(x))  # sequential: pair t's flow, then pair t learned (predict_then_learn)
            feed.observe(result.output, result.readings)
            flow = shown(result.output)[0].detach().permute(1, 2, 0).cpu().numpy()
            if on_flow is not None:
                on_flow(t, flow)
            scores.add(t, resize_flow(flow, width, height))
    finally:
        pipe.close()
    return scores


def capped(clip: Clip, ladder: list[Size], floor_side: int) -> tuple[PairScores, list[Size]]:
    """The learner whose size the motion cap sets from the flow of the pair before (``MotionCap`` on the clip's
    clock, never below ``floor_side``, as the service's); the sizes it learned at, pair by pair."""
    now = {"t": clip.times[0]}
    cap = MotionCap(ladder, floor_side, clock=lambda: now["t"])
    used: list[Size] = []

    def size_of(t: int) -> Size:
        if len(used) <= t:
            used.append(ladder[cap.top])
        return used[t]

    def observe(t: int, flow: np.ndarray) -> None:
        now["t"] = clip.times[t + 1]
        cap.observe(flow)

    return learn(clip, size_of, observe), used


def markdown(rows: dict[str, dict], used: list[Size], picture: Size, small: Size) -> str:
    lines = []
    for window in WINDOWS:
        first = next(iter(rows.values()))[window]
        lines += [f"### {window} ({first['pairs']} pairs; {first['moving_pixels']:,} moving pixels, "
                  f"{first['fast_pixels']:,} fast)", "",
                  "| learner | EPE all | EPE moving | EPE fast | moving, consistent | fast, consistent |",
                  "|---|---|---|---|---|---|"]  # fmt: skip
        for name, row in rows.items():
            lines.append(f"| {name} | " + " | ".join(f"{row[window][c]:.3f}" for c in COLUMNS) + " |")
        lines.append("")
    below = sum(size != picture for size in used)
    sides = sorted({max(size) for size in used})
    lines += [f"The capped learner learned {below} of {len(used)} pairs below {picture[0]}×{picture[1]} (long sides "
              f"{', '.join(map(str, sides))}); the fixed small size is {small[0]}×{small[1]}. EPE in pixels of the "
              "picture's size; pseudo ground truth and columns as in `bench.realflow`."]  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--video", required=True, type=Path)
    parser.add_argument("--size", help="the picture's size WxH (default: the source's own, as the service serves it)")
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args(argv)
    try:
        source = probe(args.video)
        width, height = source["width"], source["height"]
        picture = parse_size(args.size) if args.size else working_size(width, height, max(width, height))
    except (ValueError, OSError) as exc:
        parser.error(str(exc))
    cpu_side = made_for_side(*picture)  # the CPU's largest learning side, and the motion cap's floor
    small = fit(*picture, cpu_side)
    if small == picture:
        parser.error(
            f"the picture ({picture[0]}x{picture[1]}) is no larger than the CPU's learning size: nothing to compare"
        )
    torch.set_num_threads(2)
    run = Run(command=command_line("bench.learning_size", argv), directory=args.out)
    fps = min(source["fps"] or MAX_FPS, MAX_FPS)
    clip = load_clip(args.video, fps, *picture)
    rows = {}
    print(f"learning at {small[0]}x{small[1]} ...", file=sys.stderr, flush=True)
    rows[f"at {small[0]}×{small[1]}, scaled up"] = learn(clip, lambda t: small)
    print("learning at the picture's size ...", file=sys.stderr, flush=True)
    rows[f"at {picture[0]}×{picture[1]}"] = learn(clip, lambda t: picture)
    print("learning under the motion cap ...", file=sys.stderr, flush=True)
    rows["capped (the service)"], used = capped(clip, learning_ladder(picture, max(picture)), cpu_side)
    references = run_references(clip, set())
    rows.update({f"{name} at {picture[0]}×{picture[1]}": scores for name, scores in references.items()})
    summary = {
        name: {window: scores.window(pairs) for window, pairs in WINDOWS.items()} for name, scores in rows.items()
    }
    title = (
        f"{args.video.name}: the service's net learning at {small[0]}×{small[1]} or at the picture's "
        f"{picture[0]}×{picture[1]}"
    )
    data = {"picture": list(picture), "small": list(small), "sizes_used": [list(s) for s in used], "rows": summary}
    run.write(
        f"learning-size-{args.video.stem}-{picture[0]}x{picture[1]}",
        title,
        markdown(summary, used, picture, small),
        data,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
