"""Real clips as a hand-held camera would film them, scored as ``bench.adaptation`` scores a real clip.

Why: the real clips at hand are filmed from a still camera or edited (bikes' pans are cut short), and none shakes or
pans as a hand does, which is what a phone pointed at the service shows. Here each frame of a clip is seen through a
320x240 window that a hand-held camera moves: a pan whose speed wanders (each frame ``PAN_MEMORY`` of the last one's
plus noise of ``PAN_NOISE_PX``), a jitter of ``JITTER_PX`` on top, and a roll that wanders by ``ROLL_NOISE_DEG`` a
frame; encoded as H.264 (CRF ``CRF``). There is no exact flow: the made clip is scored as a real clip is
(``bench.adaptation.run_clip``: the frozen net, the adapting learner at D = 1 and 2, Farneback and DIS-fast, against
DIS-medium's refined flow on the full-size frames, over all pixels and the consistent moving ones).

    python -m bench.handheld --video ../shared/clips/box.mp4 [--video ...] [--frames 150] [--seed 0]

The made clips go to ``.clips-handheld/`` (git-ignored), each beside a record of what made it, and a later run reuses a
clip its record matches: libx264 does not encode the same filmed frames to the same pixels in every process (carphone's
and tree's frozen start moved 2-5 % between two runs), so runs compare on the same pixels only by sharing the clip.
Results go to ``bench/results/handheld/``, one file per clip. Skipped, with a message, without clips.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

import av
import cv2
import numpy as np

from bench.adaptation import run_clip
from testing.report import RESULTS, command_line

SIZE = (320, 240)  # W x H of the hand-held camera's picture
WINDOW_SHARE = 0.6  # of the source frame the window spans, leaving room for the pan
PAN_MEMORY, PAN_NOISE_PX = 0.85, 1.5  # the pan's speed: an AR(1) walk, window px a frame
JITTER_PX = 1.0  # a shake on top of the pan, each frame
ROLL_MEMORY, ROLL_NOISE_DEG = 0.9, 0.3  # the roll's walk
PAN_LIMIT = 0.18  # how far (a share of the source's width) the window's centre may wander
CRF = 23


def handheld_frames(frames: list[np.ndarray], rng: np.random.Generator) -> list[np.ndarray]:
    """Each RGB frame (all of one size) seen through the hand-held camera's window, SIZE, as the camera moves."""
    height, width = frames[0].shape[:2]
    scale = min(height / SIZE[1], width / SIZE[0]) * WINDOW_SHARE  # source px per window px
    limit = PAN_LIMIT * width / scale
    speed, place, roll = np.zeros(2), np.zeros(2), 0.0
    out = []
    for frame in frames:
        speed = PAN_MEMORY * speed + rng.normal(0, PAN_NOISE_PX, 2)
        place = np.clip(place + speed + rng.normal(0, JITTER_PX, 2), -limit, limit)
        roll = ROLL_MEMORY * roll + rng.normal(0, ROLL_NOISE_DEG)
        centre = np.array([width / 2, height / 2]) + place * scale
        to_window = np.array([[1 / scale, 0, SIZE[0] / 2 - centre[0] / scale],
                              [0, 1 / scale, SIZE[1] / 2 - centre[1] / scale], [0, 0, 1]])  # fmt: skip
        turn = np.vstack([cv2.getRotationMatrix2D((SIZE[0] / 2, SIZE[1] / 2), roll, 1.0), [0, 0, 1]])
        interpolation = cv2.INTER_AREA if scale > 1 else cv2.INTER_LINEAR
        out.append(cv2.warpAffine(frame, (turn @ to_window)[:2], SIZE, flags=interpolation,
                                  borderMode=cv2.BORDER_REFLECT))  # fmt: skip
    return out


def make_clip(source: Path, target: Path, frames: int, seed: int) -> Path:
    """``source``'s first ``frames`` frames as the hand-held camera films them, H.264 at ``target``."""
    with av.open(str(source)) as container:
        decoded = [f.to_ndarray(format="rgb24") for f in itertools.islice(container.decode(video=0), frames)]
    filmed = handheld_frames(decoded, np.random.default_rng(seed))
    target.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(target), "w") as container:
        stream = container.add_stream("libx264", rate=30)
        stream.width, stream.height, stream.pix_fmt, stream.options = *SIZE, "yuv420p", {"crf": str(CRF)}
        for picture in filmed:
            container.mux(stream.encode(av.VideoFrame.from_ndarray(picture, format="rgb24")))
        container.mux(stream.encode(None))
    return target


def camera_record(source: Path, frames: int, seed: int) -> dict:
    """What a made clip is made of: its source (name and size), the frames taken, the camera's path and settings."""
    settings = [SIZE, WINDOW_SHARE, PAN_MEMORY, PAN_NOISE_PX, JITTER_PX, ROLL_MEMORY, ROLL_NOISE_DEG, PAN_LIMIT, CRF]
    return {"source": source.name, "source_bytes": source.stat().st_size, "frames": frames, "seed": seed,
            "camera": json.loads(json.dumps(settings))}  # fmt: skip


def made_clip(source: Path, target: Path, frames: int, seed: int) -> Path:
    """``target`` as made before from the same record (module docstring), else made now (``make_clip``)."""
    record, saved = camera_record(source, frames, seed), target.with_suffix(".json")
    if target.is_file() and saved.is_file() and json.loads(saved.read_text()) == record:
        return target
    make_clip(source, target, frames, seed)
    saved.write_text(json.dumps(record, indent=1))
    return target


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--video", type=Path, action="append", default=[], help="a clip (repeat for more)")
    parser.add_argument("--frames", type=int, default=150, help="of each clip, from its first")
    parser.add_argument("--seed", type=int, default=0, help="the camera's path (the n-th clip's: seed + n)")
    parser.add_argument("--clips", type=Path, default=Path(".clips-handheld"), help="where the made clips go")
    parser.add_argument("--out", type=Path, default=RESULTS / "handheld", help="folder for the results")
    args = parser.parse_args(argv)
    videos = sorted((v for v in args.video if v.is_file()), key=lambda v: v.name)
    if not videos:
        print("bench.handheld: skipped, no clip given exists (--video FILE)")
        return 0
    if args.frames < 2:
        parser.error("--frames must be at least 2")
    command = command_line("bench.handheld", argv)
    for n, video in enumerate(videos):
        clip = made_clip(video, args.clips / f"handheld-{video.stem}.mp4", args.frames, args.seed + n)
        stem, result = run_clip(clip, args.out, command)
        first = result["versus_classical"]["first30"]["adapting"]
        print(f"{stem}: adapting / better classical, first 30 pairs: all {first['epe_all']:.3f}, "
              f"consistent moving {first['epe_moving_consistent']:.3f}", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
