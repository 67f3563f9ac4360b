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


def nominal_interval(stream: av.video.stream.VideoStream) -> float:
    """Seconds between frames as ``stream`` states its rate (30 fps where it states none): what a frame with no
    timestamp is spaced by, and how far a frame after a discontinuity follows the one before."""
    return 1.0 / float(stream.average_rate or 30)


#: A jump of the source's clock between two frames forward by more than ``DISCONTINUITY_S`` or back by more than
#: ``BACKWARD_S`` is a discontinuity, not time that passed: FFmpeg's rule for formats with discontinuities (its
#: ``dts_delta_threshold``, 10 s either way, and a decode time 0.1 s before the last). Times that ``FrameClock`` chose
#: go back only where a clock started afresh: a file's presentation times in decode order make it take the decode times.
DISCONTINUITY_S = 10.0
BACKWARD_S = 0.1


class ContinuousClock:
    """Source times made continuous across a discontinuity of the source's clock: a frame that jumps from the one
    before (``DISCONTINUITY_S``, ``BACKWARD_S``), or the first after ``restart``, follows it by the stream's nominal
    interval instead.

    Why: recordings joined end to end (MPEG-TS files concatenated, a camera's segments, a live stream whose encoder
    restarted) start their timestamps afresh mid-stream, and FFmpeg reads an MPEG-TS clock that went back far as one
    that wrapped, 26.5 hours on. Taken as they are, a jump forward made the decoder sleep that long before pacing a
    file's next frame, and the stream ended as stalled; a jump back made the resampler drop every frame until the
    source's clock caught up with the old one."""

    def __init__(self, step: float) -> None:
        self.step = step
        self.shift = 0.0
        self.last: float | None = None
        self.restarted = False

    def restart(self) -> None:
        """The source starts again (a looping file's first frame follows its last), wherever its clock stands."""
        self.restarted = True

    def __call__(self, t: float) -> float:
        """The continuous time of a frame at ``t`` on the source's clock (seconds)."""
        if self.last is not None:
            jump = t + self.shift - self.last
            if self.restarted or not -BACKWARD_S <= jump <= DISCONTINUITY_S:
                self.shift = self.last + self.step - t
        self.restarted = False
        self.last = t + self.shift
        return self.last


class FrameClock:
    """Source times of decoded frames, chosen as FFmpeg's best-effort timestamp is (``guess_correct_pts``).

    Why not ``frame.pts``: some files carry presentation timestamps in decode order (no composition offsets,
    yet B-frames), so the frames come out in the right order with timestamps that jump back and forth, and a
    resampler would drop half of them. Like ``ffprobe``'s ``best_effort_timestamp``, count how often the
    presentation and the decode timestamps fail to increase, and trust the one that fails less; a frame
    with neither gets ``index`` × the stream's nominal interval."""

    def __init__(self, step: float) -> None:
        self.step = step
        self.faulty_pts = self.faulty_dts = 0
        self.last_pts: int | None = None
        self.last_dts: int | None = None

    def __call__(self, frame: av.VideoFrame, index: int) -> float:
        pts, dts = frame.pts, frame.dts
        if dts is not None:
            self.faulty_dts += self.last_dts is not None and dts <= self.last_dts
            self.last_dts = dts
        elif pts is not None:
            self.last_dts = pts
        if pts is not None:
            self.faulty_pts += self.last_pts is not None and pts <= self.last_pts
            self.last_pts = pts
        elif dts is not None:
            self.last_pts = dts
        best = pts if pts is not None and (dts is None or self.faulty_pts <= self.faulty_dts) else dts
        if best is None or frame.time_base is None:
            return index * self.step
        return float(best * frame.time_base)


def quarter_turns(frame: av.VideoFrame) -> int:
    """How many quarter turns counterclockwise show ``frame`` upright: its display matrix's rotation. Phones store
    a portrait video as landscape pictures and say so there; every player turns them, and so must we."""
    return round(frame.rotation / 90) % 4


def upright_size(frame: av.VideoFrame) -> tuple[int, int]:
    """(width, height) of ``frame`` as it is shown (``quarter_turns``)."""
    return (frame.height, frame.width) if quarter_turns(frame) % 2 else (frame.width, frame.height)


def to_rgb(frame: av.VideoFrame, width: int | None = None, height: int | None = None) -> np.ndarray:
    """uint8 [H, W, 3] RGB of ``frame`` upright (``quarter_turns``), scaled by FFmpeg's swscale to width × height of
    the upright picture (default: the frame's own)."""
    turns = quarter_turns(frame)
    if turns % 2:
        width, height = height, width
    rgb = frame.reformat(width=width, height=height, format="rgb24").to_ndarray()
    return np.ascontiguousarray(np.rot90(rgb, turns)) if turns else rgb
