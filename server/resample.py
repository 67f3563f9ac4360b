"""Which decoded frames a fixed-rate stream keeps, their timestamps and their pixels: the pure part of decoding.

Why a module of its own: the decoder process and ``bench.realflow`` must see the same frames of the same file, or
a benchmark on real footage would not describe the service. Neither I/O, pacing nor error handling lives here.
"""

from __future__ import annotations

import av
import numpy as np


class Resampler:
    """Keeps a frame when its timestamp falls on the next tick of the 1/fps grid, within a quarter tick; drops
    the others. Nothing is ever duplicated, so a source slower than ``fps`` just yields fewer frames. The grid
    starts at the first frame's timestamp (always kept) and re-anchors on a late frame instead of catching up."""

    def __init__(self, fps: float) -> None:
        if fps <= 0:
            raise ValueError(f"fps must be positive, got {fps}")
        self.interval = 1.0 / fps
        self.tolerance = self.interval / 4
        self.next_tick: float | None = None

    def keep(self, t: float) -> bool:
        """Whether the frame at source time ``t`` (seconds) is emitted; advances the grid when it is."""
        if self.next_tick is None:
            self.next_tick = t
        if t < self.next_tick - self.tolerance:
            return False
        self.next_tick = max(self.next_tick + self.interval, t + self.interval - self.tolerance)
        return True


def frame_time(frame: av.VideoFrame, index: int, step: float) -> float:
    """A decoded frame's source time in seconds; a frame without a timestamp gets ``index`` × ``step`` (the
    stream's nominal frame interval)."""
    return frame.time if frame.time is not None else index * step


def to_rgb(frame: av.VideoFrame, width: int | None = None, height: int | None = None) -> np.ndarray:
    """uint8 [H, W, 3] RGB of ``frame``, scaled by FFmpeg's swscale to width × height (default: the frame's own)."""
    return frame.reformat(width=width, height=height, format="rgb24").to_ndarray()
