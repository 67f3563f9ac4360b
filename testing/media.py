"""Generated videos with real motion (the flow nets' own ground-truth generator), so no test or benchmark needs
footage from outside the repository."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import cv2
import numpy as np

from models.streams import generate, write_mp4

SIZE = 64  # side of the server tests' clips
LOOP = 30  # frames of loop.mp4: a window of LOOP consecutive frames shows every frame of it once


def make_video(path: Path, frames: int = 60, size: int = SIZE, fps: int = 15, seed: int = 0) -> Path:
    """One small H.264 file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_mp4(generate(size=size, frames=frames, seed=seed).frames, path, fps=fps)
    return path


def make_media(work: Path) -> Path:
    """Every clip the server tests stream, under ``work/media`` (the server's media root): good files at several
    rates and shapes, a loop, a single frame, a single pair, a non-video, a truncated file, one whose frame size
    changes mid-stream, one whose frames turn from square to portrait and, where ffmpeg is installed, a portrait video
    stored turned (``turned_copy``)."""
    media = work / "media"
    media.mkdir()
    frames = generate(SIZE, 300, seed=1).frames
    write_mp4(frames, media / "clip.mp4", fps=15)  # the streams run at 15 fps: every frame pair has the same time step
    write_mp4(frames[:LOOP], media / "loop.mp4", fps=15)
    write_mp4(frames[:20], media / "short.mp4", fps=25)
    write_mp4(frames[:1], media / "one_frame.mp4", fps=25)  # a still: flow needs two frames
    write_mp4(frames[:2], media / "two_frames.mp4", fps=25)  # one pair, learned before the stream ends
    wide = np.stack([cv2.resize(f, (160, 120)) for f in generate(SIZE, 60, seed=2).frames])
    write_mp4(wide, media / "four_three.mp4", fps=12)  # a 4:3 source at its own rate
    (media / "notes.mp4").write_text("this is not a video\n" * 50)
    data = (media / "clip.mp4").read_bytes()
    (media / "truncated.mp4").write_bytes(data[: len(data) // 2])
    write_mp4(frames[:40], work / "a.ts", fps=25)
    big = np.stack([cv2.resize(f, (96, 96)) for f in frames[40:80]])
    write_mp4(big, work / "b.ts", fps=25)
    (media / "resized.ts").write_bytes((work / "a.ts").read_bytes() + (work / "b.ts").read_bytes())
    tall = np.stack([cv2.resize(f, (48, 96)) for f in frames[80:120]])
    write_mp4(tall, work / "c.ts", fps=25)
    (media / "turned.ts").write_bytes((work / "a.ts").read_bytes() + (work / "c.ts").read_bytes())
    if shutil.which("ffmpeg"):  # a phone's portrait video: landscape pictures marked to be turned a quarter
        write_mp4(np.stack([cv2.resize(f, (96, 64)) for f in frames[:60]]), work / "landscape.mp4", fps=15)
        turned_copy(work / "landscape.mp4", media / "portrait.mp4", 90)
    return media


def turned_copy(video: Path, path: Path, degrees: int) -> Path:
    """A copy of ``video`` whose display matrix says to turn it by ``degrees`` (as a phone marks a portrait video),
    the pictures untouched; by Debian's ffmpeg (``testing.sources.NO_FFMPEG``), which PyAV cannot do. FFmpeg 6 and
    later take ``-display_rotation``; FFmpeg 5 (Debian 12) takes the container's ``rotate`` tag."""
    for how in (["-display_rotation:v:0", str(degrees), "-i", str(video)],
                ["-i", str(video), "-metadata:s:v:0", f"rotate={degrees}"]):  # fmt: skip
        command = ["ffmpeg", "-nostdin", "-loglevel", "error", "-y", *how, "-c", "copy", str(path)]
        if subprocess.run(command, capture_output=True).returncode == 0:
            return path
    raise RuntimeError(f"ffmpeg could not mark {video.name} as turned by {degrees} degrees")
