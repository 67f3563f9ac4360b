"""Exact flow on real pictures: frames of real clips moved by a known camera (pans, zooms, rotations), sharp,
blurred or faint; the shipped net against the classical methods.

Why: a real clip's only reference is DIS's own flow (``bench.realflow``), and the generator's clips
(``bench.scene_flow``) are photos pasted as layers. Here every pixel's true flow is the camera's: a frame of a real
clip, decoded at its own size, is seen through a 160x120 window that the camera's motion moves, so the pictures are
real (flat walls, faint shadows, the codec's blocks) and the flow is exact. Pans are what a hand-held camera does
most: at 0.5-20 px a frame at 160x120, sharp; blurred by a shutter open the whole frame interval; and faint
(contrast cut to 0.3 and noise of 2 levels: a dim room, fog). Zooms and rotations for the rest of a camera's
motion.

Methods: the service's net with the shipped weights (frozen, as a stream starts), Farneback, DIS-fast, zero flow;
EPE over the pixels whose true match stays in the picture (the rest have nothing to match); a picture sheet of the
first frame under a few of the motions. Skipped, with a message, without clips. →
``bench/results/camera-flow.{md,json}`` and ``camera-flow-sheet.png``.

    python -m bench.camera_flow --video ../shared/clips/box.mp4 [--video ...] [--every 20] [--per-clip 10]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import av
import cv2
import numpy as np
import torch

from bench.scene_flow import learned_flows
from models.classical import classical_methods
from models.flow_viz import flow_to_color
from testing.report import RESULTS, Run, command_line

SIZE = (160, 120)  # the window, W x H: the service's working size on a CPU
WINDOW_SHARE = 0.7  # of the frame the window spans, leaving room for the camera to move
SOURCE_PX = 1.25  # source pixels per window pixel once the frame is area-downsized: sampled without aliasing
FAINT_CONTRAST, FAINT_NOISE = 0.3, 2.0
METHODS = ("learned", "farneback", "dis_fast", "zero_flow")
#: Appended to a method's name for its EPE over all pixels, those whose match leaves the picture included: a pixel
#: leaving it still moves with the camera, and a real clip's score over all pixels counts it.
ALL_PIXELS = " (all pixels)"
SHEET = ("pan 5 px", "pan 10 px, blurred", "pan 5 px, faint", "pan 5 px, rotation 1°", "zoom 10 %")  # drawn motions


@dataclass(frozen=True)
class CameraMotion:
    """The picture's motion each frame, in the window's pixels: a ``shift``'s length (its direction drawn per
    frame), a ``zoom`` factor and a rotation of ``degrees`` about the window's centre; ``shutter``: the share of
    the frame interval the exposure lasts (0: sharp); ``faint``: contrast and noise of a dim scene."""

    name: str
    shift: float = 0.0
    zoom: float = 1.0
    degrees: float = 0.0
    shutter: float = 0.0
    faint: bool = False


MOTIONS = (
    *(CameraMotion(f"pan {v:g} px", shift=v) for v in (0.5, 2, 5, 10, 20)),
    *(CameraMotion(f"pan {v:g} px, blurred", shift=v, shutter=1.0) for v in (2, 5, 10, 20)),
    *(CameraMotion(f"pan {v:g} px, faint", shift=v, faint=True) for v in (0.5, 2, 5, 10)),
    CameraMotion("pan 5 px, rotation 1°", shift=5, degrees=1.0),
    CameraMotion("pan 5 px, rotation 1°, blurred", shift=5, degrees=1.0, shutter=1.0),
    CameraMotion("pan 5 px, zoom 2 %", shift=5, zoom=1.02),
    CameraMotion("pan 10 px, rotation 2°", shift=10, degrees=2.0),
    CameraMotion("zoom 5 %", zoom=1.05),
    CameraMotion("zoom 10 %", zoom=1.10),
    CameraMotion("rotation 2°", degrees=2.0),
    CameraMotion("rotation 5°", degrees=5.0),
)


def picture_motion(motion: CameraMotion, heading: float, t: float) -> np.ndarray:
    """3x3: where a window pixel of the first frame shows up at time ``t`` (frames): the motion ``t`` times over,
    about the window's centre."""
    cx, cy = SIZE[0] / 2, SIZE[1] / 2
    scale, angle = motion.zoom**t, np.deg2rad(motion.degrees) * t
    c, s = scale * np.cos(angle), scale * np.sin(angle)
    dx, dy = motion.shift * t * np.cos(heading), motion.shift * t * np.sin(heading)
    return np.array([[c, -s, cx + dx - c * cx + s * cy], [s, c, cy + dy - s * cx - c * cy], [0.0, 0.0, 1.0]])


def camera_pair(
    frame: np.ndarray, motion: CameraMotion, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Two uint8 RGB window pictures [2, H, W, 3] of ``frame`` (a clip's frame at its own size) as ``motion`` moves
    them, their exact flow [H, W, 2] and where its match stays in the picture (bool [H, W])."""
    w, h = SIZE
    shrink = min(frame.shape[0] / h, frame.shape[1] / w) * WINDOW_SHARE / SOURCE_PX
    source = cv2.resize(frame, None, fx=1 / shrink, fy=1 / shrink, interpolation=cv2.INTER_AREA).astype(np.float32)
    window = np.array([[SOURCE_PX, 0, (source.shape[1] - SOURCE_PX * w) / 2],
                       [0, SOURCE_PX, (source.shape[0] - SOURCE_PX * h) / 2], [0, 0, 1]])  # fmt: skip
    heading = rng.uniform(0, 2 * np.pi)

    def shot(t: float) -> np.ndarray:
        instants = [t] if motion.shutter == 0 else t + motion.shutter * np.linspace(-0.5, 0.5, 9)
        views = [cv2.warpAffine(source, (window @ np.linalg.inv(picture_motion(motion, heading, s)))[:2], SIZE,
                                flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP, borderMode=cv2.BORDER_REFLECT)
                 for s in instants]  # fmt: skip
        picture = np.mean(views, axis=0)
        if motion.faint:
            picture = (picture - picture.mean()) * FAINT_CONTRAST + picture.mean()
            picture = picture + rng.normal(0, FAINT_NOISE, picture.shape)
        return np.clip(np.rint(picture), 0, 255).astype(np.uint8)

    ys, xs = np.mgrid[0:h, 0:w].astype(np.float64)
    points = np.stack([xs.ravel(), ys.ravel(), np.ones(xs.size)])
    moved = picture_motion(motion, heading, 1.0) @ points
    flow = (moved[:2] - points[:2]).T.reshape(h, w, 2).astype(np.float32)
    inside = ((moved[0] >= 0) & (moved[0] <= w - 1) & (moved[1] >= 0) & (moved[1] <= h - 1)).reshape(h, w)
    return np.stack([shot(0.0), shot(1.0)]), flow, inside


def clip_frames(path: Path, every: int, per_clip: int) -> list[np.ndarray]:
    """Up to ``per_clip`` RGB frames of a clip at its own size, ``every`` frames apart from the fifth."""
    frames = []
    with av.open(str(path)) as container:
        for i, frame in enumerate(container.decode(video=0)):
            if i >= 5 and (i - 5) % every == 0:
                frames.append(frame.to_ndarray(format="rgb24"))
                if len(frames) == per_clip:
                    break
    return frames


def score(frames: list[np.ndarray], seed: int) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, np.ndarray]]]:
    """EPE per motion and method over the pixels whose match stays in the picture, and (``ALL_PIXELS`` appended to the
    method's name) over all pixels, every frame under each; and, for the ``SHEET`` motions, the first frame with its
    true and estimated flows."""
    classical = classical_methods()
    result, shown = {}, {}
    for motion in MOTIONS:
        rng = np.random.default_rng(seed)
        pairs, flows, inside = zip(*(camera_pair(f, motion, rng) for f in frames), strict=True)
        pairs, flows, inside = np.stack(pairs), np.stack(flows), np.stack(inside)
        estimates = {
            "learned": learned_flows(pairs),
            "farneback": np.stack([classical["farneback"](a, b) for a, b in pairs]),
            "dis_fast": np.stack([classical["dis_fast"](a, b) for a, b in pairs]),
            "zero_flow": np.zeros_like(flows),
        }
        errors = {m: np.linalg.norm(e - flows, axis=-1) for m, e in estimates.items()}
        inside_mean = {m: float(e[inside].mean()) for m, e in errors.items()}
        result[motion.name] = inside_mean | {f"{m}{ALL_PIXELS}": float(e.mean()) for m, e in errors.items()}
        if motion.name in SHEET:
            shown[motion.name] = {"frame": pairs[0, 0], "true flow": flows[0]} | {
                m: estimates[m][0] for m in METHODS if m != "zero_flow"
            }
    return result, shown


def picture_sheet(shown: dict[str, dict[str, np.ndarray]], title: str):
    """Rows = motions; columns = the first picture, the true flow, each method's; one colour scale per row (the true
    flow's largest speed: faster vectors are drawn fully saturated)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = list(next(iter(shown.values())))
    fig, axes = plt.subplots(
        len(shown), len(columns), figsize=(2.0 * len(columns), 1.5 * len(shown) + 0.6), squeeze=False
    )
    for i, (name, row) in enumerate(shown.items()):
        scale = max(1.0, float(np.linalg.norm(row["true flow"], axis=-1).max()))
        for j, column in enumerate(columns):
            image = row[column] if column == "frame" else flow_to_color(row[column], max_magnitude=scale)
            axes[i, j].imshow(image, interpolation="nearest")
            axes[i, j].set_xticks([])
            axes[i, j].set_yticks([])
            if i == 0:
                axes[i, j].set_title(column, fontsize=8)
        axes[i, 0].set_ylabel(f"{name}\n{scale:.1f} px", fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout(rect=(0, 0.0, 1, 0.95))
    fig.set_dpi(110)
    return fig


def markdown(result: dict[str, dict[str, float]], clips: list[str], frames: int) -> str:
    lines = [
        f"{frames} frames of {', '.join(clips)}, each seen through a {SIZE[0]}x{SIZE[1]} window that the camera "
        "moves (a pan's direction drawn per frame); exact flow. EPE in px over the pixels whose match stays in the "
        "picture; the last column's ratio over all pixels (a pixel leaving the picture still moves with the camera, "
        "and a real clip's score over all pixels counts it; its EPE in the .json). Blurred: a shutter open the whole "
        f"frame interval; faint: contrast x{FAINT_CONTRAST:g} and noise of {FAINT_NOISE:g} levels. The learned flow "
        "is the service's net with the shipped weights, frozen.",
        "",
        "| camera | " + " | ".join(METHODS) + " | learned / better of Farneback and DIS-fast | the same, all pixels |",
        "|---|" + "---|" * (len(METHODS) + 2),
    ]
    for name, epe in result.items():
        ratios = (epe[f"learned{a}"] / min(epe[f"farneback{a}"], epe[f"dis_fast{a}"]) for a in ("", ALL_PIXELS))
        cells = [f"{epe[m]:.3f}" for m in METHODS] + [f"{r:.2f}" for r in ratios]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class ClipBench:
    """A bench that films frames of real clips, started: its arguments, the clips given that exist (by name: the order
    draws the motions' directions, so the same clips draw the same), their frames, and where its results go."""

    args: argparse.Namespace
    videos: list[Path]
    frames: list[np.ndarray]
    run: Run


def start_clip_bench(bench: str, doc: str, argv: list[str]) -> ClipBench | None:
    """``bench`` (this one, ``bench.rolling_shutter``) started from ``argv``; None, said, where no clip given exists."""
    parser = argparse.ArgumentParser(prog=f"python -m bench.{bench}", description=doc.split("\n\n")[0])
    parser.add_argument("--video", type=Path, action="append", default=[], help="a clip (repeat for more)")
    parser.add_argument("--every", type=int, default=20, help="frames apart")
    parser.add_argument("--per-clip", type=int, default=10, help="frames from each clip at most")
    parser.add_argument("--seed", type=int, default=0, help="the motions' directions")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for the results")
    args = parser.parse_args(argv)
    if args.every < 1 or args.per_clip < 1:
        parser.error("--every and --per-clip must be at least 1")
    videos = sorted((v for v in args.video if v.is_file()), key=lambda v: v.name)
    if not videos:
        print(f"bench.{bench}: skipped, no clip given exists (--video FILE)")
        return None
    torch.set_num_threads(args.threads)
    run = Run(command=command_line(f"bench.{bench}", argv), directory=args.out)
    return ClipBench(args, videos, [f for v in videos for f in clip_frames(v, args.every, args.per_clip)], run)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if (bench := start_clip_bench("camera_flow", __doc__, argv)) is None:
        return 0
    clips, frames = [v.name for v in bench.videos], bench.frames
    result, shown = score(frames, bench.args.seed)
    title = "Exact flow on real pictures: the learned flow under a known camera motion"
    bench.run.write("camera-flow", title, markdown(result, clips, len(frames)),
                    {"clips": clips, "frames": len(frames), "epe": result})  # fmt: skip
    bench.run.png("camera-flow-sheet.png", picture_sheet(shown, title))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
