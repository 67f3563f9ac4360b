"""What learning while watching buys: the service's adapting learner against its own frozen start, on the same frames.

Every pair is scored before it is learned from, for
- ``frozen``: the shipped ``fast`` net, its weights never changed;
- ``adapting``: the service's learner from those weights (``models.online.learning_for("pretrained")``), sequential;
- ``adapting_d2``: the same learner as a PARTIME pipeline of two stages (the service's D on CPU);
- ``scratch``: the learner from random weights (PARTIME's research setting), for reference, on the unshifted streams.

``python -m bench.adaptation`` runs the set below into ``bench/results/adaptation/``: a file per stream (``.json``,
``.md``, and ``.png``: adapting / frozen over the stream) and ``summary.{md,json,png}``:
- exact-flow streams: photographs under a smooth camera with patches moving over them (``models.streams``, seeds and
  photos none of the nets' settings were chosen on; the adapting learner's since were), 128x128, 300 frames; each also
  as the five camera shifts pretraining did not show (``models.camera_shifts``: night, heavy motion blur, a starved
  H.264 encoder, infrared in false colours, flicker); the pretraining generator's clips (``models.scenes``, seeds it
  never drew) at 160x120, 300 frames; two long streams (1,500 frames) to show drift. Windows: the first and last 100
  pairs, the whole stream, and each 100 in turn;
- real clips (``--clips``, and ``.clips-heldout/`` where ``bench.heldout_clips`` fetched them), scored as
  ``bench.realflow`` scores them: against DIS-medium's refined flow on all pixels and on the moving pixels where that
  reference passes its own forward-backward test (the ``consistent`` columns), over the first 30 pairs, 100 and the
  whole clip, beside Farneback and DIS-fast.

A set run with ``--only`` rewrites the files of the streams and clips it runs, and its summary reads the set's other
streams and clips from the files an earlier run left in the folder (each row says when its file was written); with
``--summary`` it runs none and sums up those files alone (after ``--stream`` runs into the set's folder: a clean
stream's name is in each of its shifted streams' names, so ``--only`` cannot pick it alone).

``python -m bench.adaptation --heldout`` runs the photographs' streams no setting of the adapting learner was chosen
on (``HELDOUT_STREAMS``, clean and shifted) into ``bench/results/adaptation-heldout/``; ``--size 256`` makes them at
256x256 (the size issue 60 measured at) into ``adaptation-heldout-256/``.

``python -m bench.adaptation --stream FILE.npz [--shift NAME] --out STEM`` scores one exact-flow stream (the
``.npz`` of ``models.streams``, sides from ``MIN_SIDE`` up: its frames padded to the net's sides, its own pixels
scored) and writes ``STEM.json``: for ``frozen``, ``adapting`` and ``adapting_d2`` the end-point error over
``first100``, ``last100`` and ``whole`` (and ``per100``, and each pair's).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from bench.adaptation_report import LEARNERS, clip_markdown, markdown, plot, summary, versus_frozen, with_kept
from models.camera_shifts import SHIFTS, shift
from models.feeds import shown
from models.flow_metrics import epe
from models.flow_nets import build_flow_net, size_multiple
from models.online import frame_pair, learning_for, online_pipeline, predict_then_learn, stream_pairs
from models.streams import MIN_SIDE, Stream, for_net, generate, load_npz, save_npz
from testing.report import RESULTS, Run, command_line

#: The windows every learner is scored over, in pairs.
WINDOW = 100
NET = "fast"
OUT = RESULTS / "adaptation"
CACHE = Path(__file__).resolve().parent.parent / ".cache" / "adaptation"
#: The photographs' streams: (photo, seed) pairs of ``models.streams`` no setting of the nets was chosen on, the size
#: and length; the generator's clips: ``models.scenes`` seeds it never drew (pretraining drew 0 and 1), their size.
PHOTO_STREAMS = (("immunohistochemistry", 6), ("colorwheel", 7), ("astronaut", 8), ("coffee", 9))
#: ``--heldout``: photographs' streams that no setting of the adapting learner was chosen on, nor is to be: the set
#: above and the long stream chose its rates, priors and anchor, so its margins say little of unseen streams; these
#: four were fixed before they were first run (docs/notebook/2026-12-01-held-out-streams-for-the-learner.md).
HELDOUT_STREAMS = (("rocket", 11), ("hubble_deep_field", 12), ("camera", 13), ("moon", 14))
STREAM_SIZE, STREAM_FRAMES = 128, 300
SCENE_SEEDS, SCENE_SIZE = (101, 102), (160, 120)
LONG_STREAM, LONG_FRAMES = ("chelsea", 10), 1500


def windows(errors: np.ndarray) -> dict[str, object]:
    """Mean end-point error over the first and last ``WINDOW`` pairs, the whole stream, and each ``WINDOW`` in turn."""
    return {
        "first100": float(errors[:WINDOW].mean()),
        "last100": float(errors[-WINDOW:].mean()),
        "whole": float(errors.mean()),
        "per100": [float(errors[i : i + WINDOW].mean()) for i in range(0, len(errors), WINDOW)],
    }


def scored(output: torch.Tensor, truth: np.ndarray) -> float:
    """The end-point error of the flow a step showed over ``truth``'s pixels (H, W, 2): a stream padded to the net's
    sides (``models.streams.for_net``, its flow cut back) is scored on its own pixels."""
    h, w = truth.shape[:2]
    return epe(shown(output)[0, :, :h, :w].permute(1, 2, 0).numpy(), truth)


def frozen_errors(stream: Stream) -> np.ndarray:
    """Each pair's end-point error of the shipped net, never learning."""
    net = build_flow_net(NET, init="pretrained").eval()
    with torch.no_grad():
        return np.array([scored(net(x), stream.flow[t]) for t, x in enumerate(stream_pairs(stream.frames))])


def learner_errors(stream: Stream, stages: int, init: str, seed: int = 0) -> np.ndarray:
    """Each pair's end-point error of the service's learner that starts ``init``, split into ``stages`` (PARTIME;
    1: sequential), every pair scored before it is learned from (``predict_then_learn``)."""
    torch.manual_seed(seed)
    learning = learning_for(init)
    x0 = frame_pair(stream.frames[0], stream.frames[1])
    net = build_flow_net(NET, init=init)
    start = learning.frozen_start(net)  # runs the judgments the stream asks for (``Feed.judgment``)
    pipe = online_pipeline(net, x0, stages, learning=learning,
                           schedule="partime" if stages > 1 else "sequential", devices=["cpu"])  # fmt: skip
    errors = np.full(len(stream.flow), np.nan)
    with pipe:
        for r in predict_then_learn(pipe, stream_pairs(stream.frames), learning.feed(seed, stages), start):
            if r.frame is not None and r.output is not None:
                errors[r.frame] = scored(r.output, stream.flow[r.frame])
    return errors


RUNS: dict[str, Callable[[Stream], np.ndarray]] = {
    "frozen": frozen_errors,
    "adapting": lambda s: learner_errors(s, 1, "pretrained"),
    "adapting_d2": lambda s: learner_errors(s, 2, "pretrained"),
    "scratch": lambda s: learner_errors(s, 1, "scratch"),
}


@dataclass(frozen=True)
class StreamJob:
    """One exact-flow stream of the set: a photograph's stream (``photo``) or a generator's clip (``photo`` None), as
    ``shift`` shows it, and the learners that score it."""

    name: str
    seed: int
    frames: int
    photo: str | None = None
    shift: str | None = None
    learners: tuple[str, ...] = LEARNERS
    size: int = STREAM_SIZE

    def make(self) -> Stream:
        """The stream, kept in ``.cache/adaptation/`` once made (the same arguments, the same pixels)."""
        if self.photo is None:
            key = f"scene_{self.seed}_{SCENE_SIZE[0]}x{SCENE_SIZE[1]}"
        else:
            key = f"s{self.size}_{self.seed}_{self.photo}"
        path = CACHE / f"{key}_{self.frames}.npz"
        if path.is_file():
            stream = load_npz(path)
        else:
            if self.photo is None:
                from models.scenes import camera_clip

                stream = camera_clip(np.random.default_rng(self.seed), *SCENE_SIZE, self.frames)
            else:
                stream = generate(self.size, self.frames, self.seed, self.photo)
            CACHE.mkdir(parents=True, exist_ok=True)
            save_npz(stream, path)
        return shift(stream, self.shift) if self.shift else stream


def stream_set(heldout: bool = False, size: int = STREAM_SIZE) -> list[StreamJob]:
    """The exact-flow streams of the set (module docstring), longest first (they set the run's length); ``heldout``:
    ``HELDOUT_STREAMS``, each clean and as every camera shift, ``size`` px square."""
    if heldout:
        return [StreamJob(f"{photo}-{seed}" + (f"-{s}" if s else ""), seed, STREAM_FRAMES, photo, s, size=size)
                for photo, seed in HELDOUT_STREAMS for s in (None, *SHIFTS)]  # fmt: skip
    photo, seed = LONG_STREAM
    jobs = [StreamJob(f"long-{photo}-{seed}", seed, LONG_FRAMES, photo),
            StreamJob(f"long-{photo}-{seed}-night", seed, LONG_FRAMES, photo, "night")]  # fmt: skip
    for photo, seed in PHOTO_STREAMS:
        jobs.append(StreamJob(f"{photo}-{seed}", seed, STREAM_FRAMES, photo, None, (*LEARNERS, "scratch")))
        jobs += [StreamJob(f"{photo}-{seed}-{s}", seed, STREAM_FRAMES, photo, s) for s in SHIFTS]
    jobs += [StreamJob(f"scene-{seed}", seed, STREAM_FRAMES) for seed in SCENE_SEEDS]
    return jobs


def score_stream(stream: Stream, learners: tuple[str, ...]) -> dict[str, dict]:
    """Per learner (the frozen net first) its windows, its seconds and each pair's error."""
    results = {}
    for name in ("frozen", *learners):
        start = time.perf_counter()
        e = RUNS[name](stream)
        results[name] = {**windows(e), "seconds": round(time.perf_counter() - start, 1), "pairs": e.tolist()}
        print(f"  {name}: first100 {results[name]['first100']:.4f} last100 {results[name]['last100']:.4f} "
              f"whole {results[name]['whole']:.4f}", file=sys.stderr, flush=True)  # fmt: skip
    return results


def write_stream(stream: Stream, name: str, learners: tuple[str, ...], out: Path, command: str) -> dict[str, dict]:
    """Score ``stream`` and write ``out/name.{json,md,png}``; the results, with when the run started (as its files
    say)."""
    run = Run(command=command, directory=out)
    print(f"{name}: {len(stream.flow)} pairs", file=sys.stderr, flush=True)
    results = score_stream(stream, learners)
    size = "x".join(map(str, stream.flow.shape[2:0:-1]))
    title = f"{name}: {len(stream.frames)} frames {size}, net {NET}, end-point error (px), each pair before learning"
    run.png(f"{name}.png", plot(results, title))
    run.write(name, title, f"{markdown(results)}\n![adapting / frozen]({name}.png)", results)
    return {**results, "started": run.started}


def run_stream_job(job: StreamJob, out: Path, command: str) -> tuple[str, dict[str, dict]]:
    torch.set_num_threads(1)
    return job.name, write_stream(job.make(), job.name, job.learners, out, command)


# -- real clips ------------------------------------------------------------------------------------------------------
def run_clip(video: Path, out: Path, command: str) -> tuple[str, dict]:
    """A real clip as ``bench.realflow`` scores it: the frozen net (rate 0), the adapting learner at D = 1 and 2, the
    classical methods; ``out/clip-<name>.{json,md}``."""
    from bench import realflow
    from bench.realflow_report import versus_classical
    from bench.realflow_scores import WINDOWS

    torch.set_num_threads(1)
    probe = realflow.probe(video)
    width, height = realflow.working_size(probe["width"], probe["height"])
    fps = min(probe["fps"] or realflow.MAX_FPS, realflow.MAX_FPS)
    clip = realflow.load_clip(video, fps, width, height)
    args = SimpleNamespace(net=NET, seed=0)
    methods = {}
    for name, stages, lr in (("frozen", 1, 0.0), ("adapting", 1, None), ("adapting_d2", 2, None)):
        scores, info = realflow.learn(clip, "pretrained", stages, lr, args, set())
        methods[name] = {**scores.summary(), **info}
    methods.update({name: s.summary() for name, s in realflow.run_references(clip, set()).items()})
    result = {"clip": video.name, "size": [width, height], "fps": fps, "pairs": len(clip.pseudo_gt), "methods": methods,
              "versus_classical": {w: versus_classical(methods, w) for w in WINDOWS},
              "versus_frozen": {w: versus_frozen(methods, w) for w in WINDOWS}}  # fmt: skip
    stem, run = f"clip-{video.stem}", Run(command=command, directory=out)
    run.write(stem, f"{video.name} at {width}x{height}: adapting against frozen", clip_markdown(result), result)
    return stem, {**result, "started": run.started}


def run_set(args: argparse.Namespace, command: str) -> int:
    out = Path(args.out)
    jobs, videos = [], []  # ``--summary``: none run, the summary reads the folder's files alone
    if not args.summary:
        jobs = [j for j in stream_set(args.heldout, args.size) if not args.only or any(p in j.name for p in args.only)]
        folders = [] if args.no_clips else [d for d in (args.clips, Path(".clips-heldout")) if d.is_dir()]
        videos = sorted(p for d in folders for p in d.iterdir() if p.suffix in (".mp4", ".avi", ".mkv", ".mov")
                        and (not args.only or any(o in p.stem for o in args.only)))  # fmt: skip
        if not (args.clips.is_dir() or args.no_clips):
            print(f"bench.adaptation: no clips folder {args.clips}: real clips skipped", file=sys.stderr)
    run = Run(command=command, directory=out)
    with ProcessPoolExecutor(args.jobs) as pool:
        stream_futures = [pool.submit(run_stream_job, j, out, command) for j in jobs]
        clip_futures = [pool.submit(run_clip, v, out, command) for v in videos]
        streams, clips = (dict(f.result() for f in futures) for futures in (stream_futures, clip_futures))
    streams = with_kept(out, [j.name for j in stream_set(args.heldout, args.size)], streams)
    clips = with_kept(out, sorted({*clips, *(p.stem for p in out.glob("clip-*.json"))}), clips)
    text, data = summary(streams, clips)
    run.write("summary", "Learning while watching: adapting against its frozen start", text, data)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stream", help="one exact-flow stream: a .npz of models.streams (frames + exact flow)")
    parser.add_argument("--shift", choices=sorted(SHIFTS), help="--stream as this camera shift shows it")
    parser.add_argument("--out", help="--stream's results stem (default bench/results/adaptation/<stream>[-<shift>]); "
                        "the set's folder (default bench/results/adaptation)")  # fmt: skip
    parser.add_argument("--scratch", action="store_true", help="--stream: also the learner from scratch")
    parser.add_argument("--clips", type=Path, default=Path("../shared/clips"), help="real clips for the set")
    parser.add_argument("--no-clips", action="store_true", help="the set without real clips")
    parser.add_argument("--heldout", action="store_true", help="HELDOUT_STREAMS' set into adaptation-heldout/")
    parser.add_argument("--size", type=int, default=STREAM_SIZE, help="--heldout: the streams' side, px")
    parser.add_argument("--only", action="append", help="the set's streams and clips whose name holds this")
    parser.add_argument("--jobs", type=int, default=2, help="the set: streams scored at once, one torch thread each")
    parser.add_argument("--summary", action="store_true", help="the set: its summary from its folder's files alone")
    parser.add_argument("--threads", type=int, default=0, help="--stream: torch threads (0: torch's default)")
    args = parser.parse_args(argv)
    command = command_line("bench.adaptation", argv)
    multiple = size_multiple(build_flow_net(NET, init="scratch"))
    if args.stream is None:
        if args.shift or args.scratch:
            parser.error("--shift and --scratch go with --stream")
        if args.summary and args.only:
            parser.error("--summary runs no stream: not with --only")
        if args.size != STREAM_SIZE and not args.heldout:
            parser.error("--size goes with --heldout")
        if args.size % multiple:
            parser.error(f"--size must divide by {multiple}, got {args.size}")
        held = f"{OUT.name}-heldout" + (f"-{args.size}" if args.size != STREAM_SIZE else "")
        args.out = args.out or str(OUT.with_name(held) if args.heldout else OUT)
        args.no_clips = args.no_clips or args.heldout  # the held-out set is photographs' streams alone
        return run_set(args, command)
    if args.heldout or args.summary:
        parser.error("--heldout and --summary are a set's: not with --stream")
    try:
        stream = load_npz(args.stream)
    except (OSError, ValueError) as exc:
        parser.error(f"cannot read the stream: {exc}")
    if len(stream.flow) < 2 or min(stream.frames.shape[1:3]) < MIN_SIDE:
        parser.error(f"the stream needs >= 3 frames and sides of {MIN_SIDE} px or more, got {stream.frames.shape}")
    stream = for_net(stream, multiple, (lambda s: shift(s, args.shift)) if args.shift else None)
    if args.threads:
        torch.set_num_threads(args.threads)
    name = Path(args.stream).stem + (f"-{args.shift}" if args.shift else "")
    out = Path(args.out) if args.out else OUT / name
    write_stream(stream, out.name, (*LEARNERS, *(("scratch",) if args.scratch else ())), out.parent, command)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
