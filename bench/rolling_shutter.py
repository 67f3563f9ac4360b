"""Exact flow under a rolling shutter: real pictures filmed by a hand-held camera whose rows are read one after another.

Why: a phone's or a webcam's CMOS sensor reads its rows over most of the frame interval, so row y of a frame is taken
``readout`` x y / H of an interval after its first. Where a hand's speed stays the same from one frame to the next the
rows' delay cancels between the two frames; where it changes (a shake, a pan slowing down) the flow between them
changes down the picture, linearly in the row: a shear and a stretch that no similarity holds. The other benches move
a whole picture at one instant (``bench.camera_flow``, ``bench.handheld``); here the camera's speed changes between
the two frames of each pair and the rows are read in turn, so the true flow is exact for every pixel, rolling
shutter included. Each pair: a frame of a real clip seen through a 160x120 window (as ``bench.camera_flow``), panned
at ``pan`` px a frame (a heading drawn per pair), its speed changed by ``change`` px a frame in another drawn
direction at the second frame; rows read over ``readout`` of the interval (0: a global shutter); blurred: a shutter
open half the interval.

Methods: the service's net with the shipped weights (frozen, as a stream starts), Farneback, DIS-fast, DIS-medium,
zero flow; EPE over the pixels whose match stays in the picture. Skipped, with a message, without clips. →
``bench/results/rolling-shutter.{md,json}``.

    python -m bench.rolling_shutter --video ../shared/clips/box.mp4 [--video ...] [--every 20] [--per-clip 10]
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import cv2
import numpy as np

from bench.camera_flow import SIZE, SOURCE_PX, WINDOW_SHARE, start_clip_bench
from bench.scene_flow import learned_flows
from models.classical import classical_methods

METHODS = ("learned", "farneback", "dis_fast", "dis_medium", "zero_flow")
BLUR_SHUTTER = 0.5  # of the frame interval, where a motion is blurred
ROUNDS = 6  # fixed-point rounds that find the row a scene point is read on in the second frame (the delay is smooth)


@dataclass(frozen=True)
class HandMotion:
    """A pan of ``pan`` px a frame whose speed changes by ``change`` px a frame at the second frame; rows read over
    ``readout`` of the frame interval; each exposure ``shutter`` of it long (0: sharp)."""

    name: str
    pan: float
    change: float
    readout: float = 0.0
    shutter: float = 0.0


MOTIONS = tuple(
    HandMotion(f"pan {pan:g} px, speed changing {change:g} px{shutter_name}", pan, change, readout, shutter)
    for pan, change in ((2, 2), (5, 3), (10, 5))
    for readout, shutter, shutter_name in (
        (0.0, 0.0, ", global shutter"),
        (0.8, 0.0, ", rolling shutter"),
        (0.8, BLUR_SHUTTER, ", rolling shutter, blurred"),
    )
)


def position(first: np.ndarray, second: np.ndarray, t: np.ndarray) -> np.ndarray:
    """[..., 2]: how far the picture has moved by time ``t`` (frames, [...]): at ``first`` px a frame up to the second
    frame, at ``second`` after it."""
    t = t[..., None]
    return np.where(t <= 1.0, first * t, first + second * (t - 1.0))


def hand_pair(
    frame: np.ndarray, motion: HandMotion, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Two uint8 RGB window pictures [2, H, W, 3] of ``frame`` (a clip's frame at its own size) as ``motion`` films
    them, their exact flow [H, W, 2] from the first to the second and where its match stays in the picture."""
    w, h = SIZE
    shrink = min(frame.shape[0] / h, frame.shape[1] / w) * WINDOW_SHARE / SOURCE_PX
    source = cv2.resize(frame, None, fx=1 / shrink, fy=1 / shrink, interpolation=cv2.INTER_AREA).astype(np.float32)
    offset = np.array([(source.shape[1] - SOURCE_PX * w) / 2, (source.shape[0] - SOURCE_PX * h) / 2])
    first = motion.pan * _heading(rng)
    second = first + motion.change * _heading(rng)
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float64)
    grid = np.stack([xs, ys], -1)
    delay = motion.readout * ys / h  # when each row is read, after the frame's first

    def shot(t: float) -> np.ndarray:
        instants = [0.0] if motion.shutter == 0 else motion.shutter * np.linspace(-0.5, 0.5, 9)
        views = []
        for s in instants:
            scene = grid - position(first, second, t + delay + s)  # the point each pixel shows, in the first view
            maps = (offset + SOURCE_PX * scene).astype(np.float32)
            views.append(cv2.remap(source, maps[..., 0], maps[..., 1], cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT))
        return np.clip(np.rint(np.mean(views, axis=0)), 0, 255).astype(np.uint8)

    scene = grid - position(first, second, delay)
    moved = grid.copy()
    for _ in range(ROUNDS):  # the row a point is read on decides when, and so where
        moved = scene + position(first, second, 1.0 + motion.readout * moved[..., 1] / h)
    flow = (moved - grid).astype(np.float32)
    inside = (moved[..., 0] >= 0) & (moved[..., 0] <= w - 1) & (moved[..., 1] >= 0) & (moved[..., 1] <= h - 1)
    return np.stack([shot(0.0), shot(1.0)]), flow, inside


def _heading(rng: np.random.Generator) -> np.ndarray:
    angle = rng.uniform(0, 2 * np.pi)
    return np.array([np.cos(angle), np.sin(angle)])


def score(frames: list[np.ndarray], seed: int) -> dict[str, dict[str, float]]:
    """EPE per motion and method over the pixels whose match stays in the picture, every frame under each motion."""
    classical = classical_methods()
    result = {}
    for motion in MOTIONS:
        rng = np.random.default_rng(seed)
        pairs, flows, inside = (np.stack(v) for v in zip(*(hand_pair(f, motion, rng) for f in frames), strict=True))
        estimates = {"learned": learned_flows(pairs)}
        estimates |= {
            m: np.stack([classical[m](a, b) for a, b in pairs]) for m in ("farneback", "dis_fast", "dis_medium")
        }
        estimates["zero_flow"] = np.zeros_like(flows)
        result[motion.name] = {
            m: float(np.linalg.norm(e - flows, axis=-1)[inside].mean()) for m, e in estimates.items()
        }
    return result


def markdown(result: dict[str, dict[str, float]], clips: list[str], frames: int) -> str:
    lines = [
        f"{frames} frames of {', '.join(clips)}, each seen through a {SIZE[0]}x{SIZE[1]} window that a hand-held "
        "camera pans, its speed changing at the second frame (both directions drawn per pair); rows read over 0.8 of "
        f"the frame interval (rolling) or at once (global); blurred: a shutter open {BLUR_SHUTTER:g} of the interval. "
        "Exact flow; EPE in px over the pixels whose match stays in the picture. The learned flow is the service's net "
        "with the shipped weights, frozen.",
        "",
        "| camera | " + " | ".join(METHODS) + " | learned / DIS-medium | learned / better of Farneback and DIS-fast |",
        "|---|" + "---|" * (len(METHODS) + 2),
    ]
    for name, epe in result.items():
        ratios = (epe["learned"] / epe["dis_medium"], epe["learned"] / min(epe["farneback"], epe["dis_fast"]))
        lines.append(
            f"| {name} | " + " | ".join([f"{epe[m]:.3f}" for m in METHODS] + [f"{r:.2f}" for r in ratios]) + " |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if (bench := start_clip_bench("rolling_shutter", __doc__, argv)) is None:
        return 0
    clips, frames = [v.name for v in bench.videos], bench.frames
    result = score(frames, bench.args.seed)
    title = "Exact flow under a rolling shutter: real pictures, a hand-held camera's changing speed"
    bench.run.write("rolling-shutter", title, markdown(result, clips, len(frames)),
                    {"clips": clips, "frames": len(frames), "epe": result})  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
