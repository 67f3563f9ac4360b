"""Online unsupervised flow on real footage, scored prequentially against a pseudo ground truth.

``python -m bench.realflow --video FILE [--size WxH] [--fps N] [--stages 1,2] [--init scratch|PATH ...] [--noise L]
[--shift NAME]``

The clip is decoded as the service decodes it (PyAV, ``server.stream.source.resample``: timestamps on the 1/fps grid,
swscale to the working size; offline, so never paced) and played once. Every learner is the service's
(``online_pipeline``) and scores each pair with the weights it had before learning from it (``predict_then_learn``; a
PARTIME output belongs to pair ``r.frame``). No true flow exists, so the reference is DIS with variational refinement
on the source's full-resolution frames, resized to the working size (``dis_refined``, ``resize_flow``). Farneback and
DIS-fast run at the working size, like the learners, and zero flow is the floor. Scores over the first 30 and 100
pairs and the whole clip: EPE on all pixels, on moving ones (pseudo-GT > 0.5 px) and on fast ones (pseudo-GT > 4 px
per frame, ``FAST_MOTION``: what coarse-to-fine nets damp), the last two also over the pixels where the pseudo-GT
passes its own forward-backward test (``consistent_mask``: elsewhere it is occluded or wrong, as on a fast, blurred
hand), the moving region's F1 (flow > 0.5 px against pseudo-GT > 0.5 px; pixels pooled over the window) and the
photometric error; and each learner's EPE over that of the better of Farneback and DIS-fast, per window (the yardstick
a learned flow must beat; the scores: ``bench.realflow_scores``). A pair where the reference has no correspondence (a
scene cut: ``MATCHED_SHARE``) is scored for no method and listed; so are the pairs the first learner loses most on
(``losing_pairs``), with how well the reference explains the frames there beside the learner's flow and the classical
method's. Writes ``realflow-<clip>-<W>x<H>.{json,md,png}`` and ``-sheet.png`` (default under bench/results/); the
sheet also shows the pair with the fastest motion. ``--noise L``: what every method sees has a camera's noise added
(Gaussian, L levels of 8 bits at the working size, rounded to them; ``-noiseL`` in the file names), while the
reference stays the clean source's: how the flow holds up before a noisy sensor, as a webcam's raw frames in dim light
are. ``--shift NAME``: what every method sees is the clip as a camera shift of ``models.camera_shifts`` shows it
(night, blur, h264, infrared, flicker; seeded; ``-NAME`` in the file names), the reference again the clean source's:
the exact-flow streams' shifts (``bench.adaptation``) on real footage, whose pictures and motions they do not hold.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

import av
import cv2
import numpy as np
import torch
from torch import nn

from bench.flow import learner_name, parse_stages, plot
from bench.realflow_report import (
    AS_SHIPPED,
    CLASSICAL,
    fastest_pair,
    losing_pairs,
    markdown,
    picture_sheet,
    sheet_pairs,
    versus_as_shipped,
    versus_classical,
)
from bench.realflow_scores import WINDOWS, Clip, PairScores
from models import feeds
from models.camera_shifts import SHIFTS
from models.classical import REFINEMENT, classical_methods, dis_refined, resize_flow
from models.flow_metrics import FAST_MOTION, consistent_mask
from models.flow_nets import FLOW_NETS, INITS, build_flow_net
from models.online import frame_pair, learning_for, online_pipeline, predict_then_learn, stream_pairs
from pipeline_core import Pipeline
from server.stream.sizing import NET_MULTIPLE, fit, made_for_side, same_shape
from server.stream.source.resample import ContinuousClock, FrameClock, Resampler, nominal_interval, to_rgb, upright_size
from testing.report import Run, command_line

MAX_FPS = 30.0  # default rate: the source's own, capped here


def working_size(width: int, height: int, long_side: int | None = None) -> tuple[int, int]:
    """The source's aspect ratio with ``long_side`` on its longer side (None: the CPU's largest learning side,
    ``made_for_side``), both sides multiples of the nets' ``NET_MULTIPLE``: the size the service would learn at on CPU
    (``server.stream.sizing.fit``)."""
    return fit(width, height, long_side or made_for_side(width, height))


def parse_size(text: str) -> tuple[int, int]:
    """``"160x120"`` -> (160, 120); ValueError unless both sides are positive multiples of ``NET_MULTIPLE``."""
    width, height = (int(v) for v in text.lower().split("x"))
    if width <= 0 or height <= 0 or width % NET_MULTIPLE or height % NET_MULTIPLE:
        raise ValueError(f"sides must be positive multiples of {NET_MULTIPLE}, got {text!r}")
    return width, height


def probe(path: Path) -> dict:
    """The first video stream's width and height as shown (its first frame upright, as the service shows it:
    ``upright_size``), nominal rate (None if unknown) and codec."""
    with av.open(str(path)) as container:
        if not container.streams.video:
            raise ValueError(f"{path} has no video stream")
        vs = container.streams.video[0]
        rate = vs.average_rate or vs.guessed_rate
        first = next(container.decode(vs), None)
        if first is None:
            raise ValueError(f"{path} has no frame to decode")
        width, height = upright_size(first)
        return {"width": width, "height": height, "fps": float(rate) if rate else None, "codec": vs.codec_context.name}


def load_clip(path: Path, fps: float, width: int, height: int) -> Clip:
    """Decode once as the service would (``Resampler`` keeps the frames, ``to_rgb`` scales them), keeping the
    working-size frames and the pseudo ground truth between consecutive kept frames at full resolution, with where
    it is consistent: a working-size pixel whose full-resolution pixels mostly pass the forward-backward test. Frames
    that change size mid-clip are scaled to the first one's, as the service scales them to its picture; a clip whose
    frames change shape (the service turns its picture there: ``sizing.picture_for``) is refused, its parts are to be
    scored one at a time."""
    reference = dis_refined()
    frames, flows, consistent, times, decoded, backwards, last = [], [], [], [], 0, 0, -np.inf
    previous: np.ndarray | None = None
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        step = nominal_interval(stream)
        clock, continuous, grid = FrameClock(step), ContinuousClock(step), Resampler(fps)
        for index, frame in enumerate(container.decode(stream)):
            decoded += 1
            t = continuous(clock(frame, index))
            backwards, last = backwards + (t < last), t
            if not grid.keep(t):
                continue
            if previous is not None and not same_shape(upright_size(frame), previous.shape[1::-1]):
                raise ValueError(f"{path}: its frames change shape at {t:.2f} s: score each part on its own")
            full = to_rgb(frame) if previous is None else to_rgb(frame, previous.shape[1], previous.shape[0])
            if previous is not None:
                forward = reference(previous, full)
                passed = consistent_mask(forward, reference(full, previous)).astype(np.float32)
                consistent.append(cv2.resize(passed, (width, height), interpolation=cv2.INTER_AREA) >= 0.5)
                flows.append(resize_flow(forward, width, height))
            previous = full
            frames.append(to_rgb(frame, width, height))
            times.append(t)
    if len(frames) < 2:
        raise ValueError(f"{path}: {len(frames)} frame(s) kept at {fps:g} fps, need 2")
    info = {"decoded": decoded, "kept": len(frames), "backwards_timestamps": backwards,
            "full_size": list(previous.shape[1::-1])}  # fmt: skip
    return Clip(np.stack(frames), np.stack(flows), np.stack(consistent), times, info)


def initial_net(init: str, net: str, seed: int) -> nn.Sequential:
    """The net in an initial state: ``pretrained`` = the shipped weights, ``scratch`` = random weights drawn with
    ``seed``, a path = a saved ``state_dict`` of the net (a candidate before it ships)."""
    torch.manual_seed(seed)
    model = build_flow_net(net, init=init if init in INITS else "scratch")
    if init not in INITS:
        model.load_state_dict(torch.load(init, map_location="cpu", weights_only=True))
    return model


def build_learner(model: nn.Sequential, init: str, sample: torch.Tensor, stages: int, lr: float) -> Pipeline:
    """The service's learner of ``model``, the net in the initial state ``init`` (``initial_net``), learning as a
    learner that starts there does."""
    return online_pipeline(model, sample, stages, lr, learning=learning_for(init))


def init_label(init: str) -> str:
    return init if init in INITS else Path(init).stem


def with_sensor_noise(clip: Clip, levels: float, seed: int) -> Clip:
    """The clip with Gaussian noise of ``levels`` 8-bit levels on its working-size frames, rounded to 8 bits as a
    camera's are; its reference unchanged (the scene's motion, not the noise's)."""
    noise = np.random.default_rng(seed).normal(0.0, levels, clip.frames.shape)
    return replace(clip, frames=np.clip(np.rint(clip.frames + noise), 0, 255).astype(np.uint8))


def with_camera_shift(clip: Clip, name: str, seed: int) -> Clip:
    """The clip as the camera shift ``name`` (``models.camera_shifts.SHIFTS``) shows it: its working-size frames
    shifted, a motion blur along the reference's flow; its reference unchanged."""
    return replace(clip, frames=SHIFTS[name](clip.frames, clip.pseudo_gt, np.random.default_rng(seed)))


def learn(
    clip: Clip, init: str, stages: int, lr: float | None, args: argparse.Namespace, shown: set[int]
) -> tuple[PairScores, dict]:
    """One pass over the clip, each pair scored before the learner learns from it; ``lr`` None: by init. Paired as
    the service pairs frames: one that begins a new shot with itself (``stream_pairs``)."""
    pairs = stream_pairs(clip.frames)
    scores = PairScores(clip, shown)
    learning = learning_for(init)
    lr = learning.lr if lr is None else lr
    model = initial_net(init, args.net, args.seed)
    start = learning.frozen_start(model)  # the judgments' (``Feed.judgment``), taken before any learning
    with build_learner(model, init, frame_pair(clip.frames[0], clip.frames[1]), stages, lr) as pipe:
        for r in predict_then_learn(pipe, pairs, learning.feed(args.seed, stages), start):
            scores.seconds.append(r.step_seconds)
            if r.frame is not None:
                scores.add(r.frame, feeds.shown(r.output)[0].detach().permute(1, 2, 0).cpu().numpy(), r.loss)
    return scores, {"init": init, "stages": stages, "balance": pipe.balance, "lr": lr, "net": args.net}


def run_as_shipped(clip: Clip, net: str, shown: set[int]) -> PairScores:
    """The pretrained net as shipped, frozen and shown each pair as it comes: no feed (``learning_for``), so neither
    its flow memory, still gate nor a night camera's smoothing; what the feed costs or buys shows against it."""
    model = build_flow_net(net, init="pretrained").eval()
    scores = PairScores(clip, shown)
    with torch.no_grad():
        for t, x in enumerate(stream_pairs(clip.frames)):
            start = time.perf_counter()
            flow = feeds.shown(model(x))[0].permute(1, 2, 0).numpy()
            scores.seconds.append(time.perf_counter() - start)
            scores.add(t, flow)
    return scores


def run_references(clip: Clip, shown: set[int]) -> dict[str, PairScores]:
    """Farneback and DIS-fast on the working-size frames, and zero flow."""
    methods = classical_methods()
    out = {}
    for name in CLASSICAL:
        scores = out[name] = PairScores(clip, shown)
        for t in range(len(clip.pseudo_gt)):
            start = time.perf_counter()
            flow = methods[name](clip.frames[t], clip.frames[t + 1])
            scores.seconds.append(time.perf_counter() - start)
            scores.add(t, flow)
    zero = out["zero_flow"] = PairScores(clip, shown)
    for t in range(len(clip.pseudo_gt)):
        zero.add(t, np.zeros_like(clip.pseudo_gt[t]))
    return out


def parse_rates(text: str | None) -> list[float | None]:
    """``--lr``: comma-separated rates (0: the weights stay frozen), or none given (each init's default)."""
    if text is None:
        return [None]
    try:
        rates = [float(r) for r in text.split(",")]
    except ValueError:
        raise ValueError(f"--lr must be comma-separated numbers, got {text!r}") from None
    if not rates or any(not r >= 0 for r in rates):
        raise ValueError(f"--lr rates must not be negative, got {text!r}")
    return rates


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--video", required=True, type=Path, help="a video file PyAV can decode")
    parser.add_argument(
        "--size",
        help="working size WxH (default: the source's aspect with about 160x120's pixels, as the service on CPU)",
    )
    parser.add_argument("--fps", type=float, help=f"resampling rate (default: the source's, at most {MAX_FPS:g})")
    parser.add_argument("--stages", default="1,2", help="comma-separated pipeline depths; 1 = sequential")
    parser.add_argument(
        "--init",
        action="append",
        help="pretrained, scratch or a saved state_dict of the net; repeatable (default: both)",
    )
    parser.add_argument("--net", default="fast", choices=sorted(FLOW_NETS), help="default: the service's")
    parser.add_argument(
        "--lr",
        help="Adam lr of every stage, comma-separated to compare several in one run; default: by init (learning_for)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--noise", type=float, default=0.0, help="Gaussian noise on what the methods see, in 8-bit levels (default 0)"
    )
    parser.add_argument(
        "--shift", choices=sorted(SHIFTS), help="what the methods see as this camera shift shows it (default: filmed)"
    )
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch default)")
    parser.add_argument("--out", type=Path, default=Path("bench/results"), help="folder for the results")
    args = parser.parse_args(argv)
    inits = args.init or list(INITS)
    try:
        stages = parse_stages(args.stages)
        rates = parse_rates(args.lr)
        size = parse_size(args.size) if args.size else None
        if not args.noise >= 0:
            raise ValueError(f"--noise must be a level of 0 or more, got {args.noise:g}")
        source = probe(args.video)
    except (ValueError, OSError, av.error.FFmpegError) as exc:
        parser.error(str(exc))
    for init in inits:
        if init not in INITS and not Path(init).is_file():
            parser.error(f"--init must be one of {', '.join(INITS)} or a state_dict file, got {init!r}")
    width, height = size or working_size(source["width"], source["height"])
    fps = args.fps or min(source["fps"] or MAX_FPS, MAX_FPS)
    if args.threads:
        torch.set_num_threads(args.threads)
    run, start = Run(command=command_line("bench.realflow", argv), directory=args.out), time.perf_counter()

    print(f"{args.video.name}: decoding at {fps:g} fps, pseudo-GT ...", file=sys.stderr, flush=True)
    try:
        clip = load_clip(args.video, fps, width, height)
    except ValueError as exc:  # too few frames, or frames that change shape
        parser.error(str(exc))
    if args.shift:
        clip = with_camera_shift(clip, args.shift, args.seed)
    if args.noise:
        clip = with_sensor_noise(clip, args.noise, args.seed)
    gt_seconds = time.perf_counter() - start
    pairs = len(clip.pseudo_gt)
    fastest = fastest_pair(clip.pseudo_gt, clip.unmatched)
    shown = {*sheet_pairs(pairs), fastest}
    all_scores: dict[str, PairScores] = {}
    info: dict[str, dict] = {}
    for init in inits:
        for d in stages:
            for lr in rates:
                name = f"{init_label(init)}/{learner_name(d)}" + (f" lr {lr:g}" if len(rates) > 1 else "")
                print(f"{name}: learning online over {pairs} pairs ...", file=sys.stderr, flush=True)
                all_scores[name], info[name] = learn(clip, init, d, lr, args, shown)
    if "pretrained" in inits:
        all_scores[AS_SHIPPED] = run_as_shipped(clip, args.net, shown)
    print("classical references ...", file=sys.stderr, flush=True)
    all_scores.update(run_references(clip, shown))

    matched = ~clip.unmatched  # the reference's statistics, like the scores, over the pairs with a correspondence
    speeds, consistent = np.linalg.norm(clip.pseudo_gt[matched], axis=-1), clip.consistent[matched]
    seen_as = (f" through the camera shift {args.shift!r}" if args.shift else "") + (
        f" with noise of {args.noise:g} levels" if args.noise else ""
    )
    result = {
        "title": f"{args.video.name} at {width}x{height}, {fps:g} fps{seen_as}: online flow vs a pseudo ground truth",
        "torch_threads": torch.get_num_threads(),
        "noise_levels": args.noise,
        "camera_shift": args.shift,
        "clip": {
            "path": str(args.video),
            "source": source,
            **clip.info,
            "fps": fps,
            "size": [width, height],
            "pairs": pairs,
            "times": clip.times,
        },  # fmt: skip
        "pseudo_gt": {
            "method": f"DIS medium + variational refinement at {clip.info['full_size'][0]}x{clip.info['full_size'][1]}",
            "refinement": REFINEMENT,
            "mean_magnitude": float(speeds.mean()),
            "moving_fraction": float((speeds > 0.5).mean()),
            "fast_fraction": float((speeds > FAST_MOTION).mean()),
            "consistent_moving_fraction": float(consistent[speeds > 0.5].mean()) if (speeds > 0.5).any() else 1.0,
            "seconds": gt_seconds,
        },
        "unmatched_pairs": np.flatnonzero(clip.unmatched).tolist(),
        "sheet_pairs": sorted(shown),
        "fastest_pair": fastest,
        "methods": {name: {**scores.summary(), **info.get(name, {})} for name, scores in all_scores.items()},
    }
    result["versus_classical"] = {window: versus_classical(result["methods"], window) for window in WINDOWS}
    result["versus_as_shipped"] = {window: versus_as_shipped(result["methods"], window) for window in WINDOWS}
    if info:  # the first learner's
        result["losing_pairs"] = losing_pairs(all_scores, next(iter(info)))
    result["seconds"] = time.perf_counter() - start
    stem = f"realflow-{args.video.stem}-{width}x{height}" + (f"-{args.shift}" if args.shift else "")
    stem += f"-noise{args.noise:g}" if args.noise else ""
    run.png(f"{stem}.png", plot(all_scores, result["title"]))
    run.png(f"{stem}-sheet.png", picture_sheet(clip, all_scores, result["title"], fastest))
    body = f"{markdown(result)}\n![over time]({stem}.png)\n\n![pictures]({stem}-sheet.png)"
    run.write(stem, result["title"], body, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
