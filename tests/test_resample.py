"""The decoder's frame selection (``server.stream.source.resample``, shared with ``bench.realflow``): timestamps in,
frames out."""

import itertools
import os
import queue
import subprocess
from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np
import pytest

from models.streams import generate, write_mp4
from server.errors import SourceError
from server.stream.config import DecoderConfig
from server.stream.protocol import SourceResized
from server.stream.source.decoder import (
    LATE_S,
    Reporter,
    Schedule,
    _container_frames,
    _emit,
    _webcam_frames,
)
from server.stream.source.opening import describe, video_stream
from server.stream.source.resample import ContinuousClock, FrameClock, Resampler, to_rgb, upright_size
from server.stream.source.sources import SourceSpec
from testing.media import turned_copy
from testing.sources import NO_FFMPEG


def kept(times: list[float], fps: float) -> list[float]:
    grid = Resampler(fps)
    return [t for t in times if grid.keep(t)]


def test_halves_a_source_at_twice_the_rate():
    times = [i / 30 for i in range(10)]
    assert kept(times, 15) == times[::2]


def test_never_duplicates_a_slower_source_and_tolerates_ntsc_rates():
    times = [i / 15 for i in range(10)]
    assert kept(times, 30) == times  # asking for more frames than there are gives every frame once
    ntsc = [i * 1001 / 30000 for i in range(300)]
    assert kept(ntsc, 30) == ntsc and kept(ntsc, 30000 / 1001) == ntsc  # 29.97 at 30: within a quarter tick


def test_grid_starts_at_the_first_frame_and_re_anchors_after_a_gap():
    assert kept([5.0, 5.04, 5.1, 7.0, 7.04, 7.1], 10) == [5.0, 5.1, 7.0, 7.1]


def test_frames_whose_timestamps_go_backwards_are_dropped():
    # Files whose container timestamps are in decode order: the decoder hands out presentation order carrying
    # the wrong timestamps, and every frame stamped before the next tick is dropped (seen on real H.264 files).
    assert kept([0.0, 0.1, 0.067, 0.134, 0.033, 0.234], 30) == [0.0, 0.1, 0.134, 0.234]


def stamped(pts: int | None, dts: int | None) -> av.VideoFrame:
    frame = av.VideoFrame(16, 16, "rgb24")
    frame.pts, frame.dts, frame.time_base = pts, dts, Fraction(1, 1000)
    return frame


def test_decode_order_timestamps_fall_back_to_the_decode_times():
    # box.mp4-like: presentation timestamps in decode order (pts jumps back), decode timestamps increasing.
    clock = FrameClock(1 / 30)
    stamps = [(0, 67), (101, 101), (67, 134), (134, 167), (34, 201), (234, 234), (201, 267)]
    times = [clock(stamped(p, d), i) for i, (p, d) in enumerate(stamps)]
    assert times[:2] == [0.0, 0.101]  # until the first fault, presentation time
    assert times[2:] == [0.134, 0.167, 0.201, 0.234, 0.267]  # then the decode times, which never went back
    assert kept(times, 30) == times  # all increasing: none dropped at the source rate


def test_good_presentation_timestamps_are_kept_even_when_reordered_decode_times_repeat():
    clock = FrameClock(1 / 30)
    times = [clock(stamped(p, d), i) for i, (p, d) in enumerate([(0, None), (33, 33), (67, 33), (100, 67)])]
    assert times == [0.0, 0.033, 0.067, 0.1]


def test_a_clock_that_starts_afresh_mid_stream_continues_and_real_gaps_stay():
    continuous = ContinuousClock(0.1)
    # back, a 5.8 s gap (kept), forward, back by 1.6 s (a joined file's two seconds), back by 0.05 s (kept)
    times = [1000.0, 1000.1, 1000.2, 3.0, 3.1, 3.2, 9.0, 9.1, 5000.0, 5000.1, 4998.5, 4998.6, 4998.55]
    mended = [continuous(t) for t in times]
    expected = [1000.0, 1000.1, 1000.2, 1000.3, 1000.4, 1000.5, 1006.3, 1006.4, 1006.5, 1006.6, 1006.7, 1006.8, 1006.75]
    assert np.allclose(mended, expected)
    assert len(kept(mended[:-1], 10)) == len(times) - 1
    assert kept(times, 10) == [1000.0, 1000.1, 1000.2, 5000.0, 5000.1]  # as they were, the frames after the jump
    # back were dropped until the old clock's time came round


Part = tuple[int, tuple[int, int]]  # a recording's first time (s) and its frames' size (width, height)


def joined_recordings(path: Path, parts: tuple[Part, ...], fps: int = 10, frames: int = 20) -> Path:
    """MPEG-TS recordings joined end to end, as a camera's segments are."""
    data = []
    for n, (start, (width, height)) in enumerate(parts):
        part = path.with_name(f"part{n}.ts")
        with av.open(str(part), "w", format="mpegts") as container:
            stream = container.add_stream("mpeg2video", rate=fps)
            stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
            for i in range(frames):
                frame = av.VideoFrame.from_ndarray(np.full((height, width, 3), 10 * i, np.uint8), format="rgb24")
                frame.pts, frame.time_base = start * fps + i, Fraction(1, fps)
                container.mux(stream.encode(frame))
            container.mux(stream.encode())
        data.append(part.read_bytes())
    path.write_bytes(b"".join(data))
    return path


def decoded(path: Path) -> tuple[list, list]:
    """What the decoder's frame iterator yields for the file at ``path``, and what it told the stream's work."""
    cfg = DecoderConfig(SourceSpec("file", str(path), live=False), None, 30.0, 640, False, 5.0, 5.0)
    events: queue.Queue = queue.Queue()
    with av.open(str(path)) as container:
        frames = list(_container_frames(cfg, container, Reporter(events)))
    return frames, [events.get() for _ in range(events.qsize())]


def test_the_decoder_reads_joined_recordings_as_one_stream_and_keeps_the_files_own_positions(tmp_path):
    # The second part's clock starts at 0 where the first's ended at 1002 s: FFmpeg reads it as the 33-bit clock
    # wrapping, 26.5 hours on.
    frames, _ = decoded(joined_recordings(tmp_path / "joined.ts", ((1000, (64, 48)), (0, (64, 48)))))
    source_times, positions = np.array([f[1] for f in frames]), np.array([f[2] for f in frames])
    assert len(frames) == 40
    assert np.allclose(np.diff(source_times), 0.1)  # paced as one stream: no 26-hour wait before the second part
    assert positions.max() - positions.min() > 3600  # a resume seeks to where the file itself has the frame
    assert {f[3] for f in frames} == {0}  # one shot: the frames keep their size


def test_a_looping_file_goes_on_by_one_interval_wherever_its_clock_starts(tmp_path):
    # MPEG-TS files start their clock where the recording did (here at 2 s): the seam was a 2.1 s pause.
    path = joined_recordings(tmp_path / "loop.ts", ((2, (64, 48)),))
    cfg = DecoderConfig(SourceSpec("file", str(path), live=False), None, 30.0, 640, True, 5.0, 5.0)
    with av.open(str(path)) as container:
        frames = list(itertools.islice(_container_frames(cfg, container, Reporter(queue.Queue())), 45))
    assert np.allclose(np.diff([f[1] for f in frames]), 0.1)  # paced as one stream across both seams
    assert [f[3] for f in frames] == [0] * 20 + [1] * 20 + [2] * 5  # each start again a new shot
    assert frames[20][2] == frames[0][2]  # the position is the file's own


class Written:
    """A frame ring's stand-in: what the decoder writes into it (the picture's size and the shot), at once."""

    stopping, ready, ended = False, True, False

    def __init__(self) -> None:
        self.frames: list[tuple[tuple[int, int], int]] = []

    def set_ended(self) -> None:
        self.ended = True

    def sleep(self, seconds: float) -> bool:
        return False  # no pacing: the test reads the decisions, not the clock

    def write(self, rgb: np.ndarray, capture_time: float, source_time: float, slots: object, shot: int = 0) -> int:
        self.frames.append(((rgb.shape[1], rgb.shape[0]), shot))
        return 0


def emitted(path: Path) -> tuple[list, list]:
    """What the decoder writes into the ring for the file at ``path`` (``Written``), and what it told the stream's
    work."""
    cfg = DecoderConfig(SourceSpec("file", str(path), live=False), None, 30.0, 640, False, 5.0, 5.0)
    events: queue.Queue = queue.Queue()
    report, ring = Reporter(events), Written()
    with av.open(str(path)) as container:
        described = describe(container, video_stream(container, 640))
        _emit(cfg, _container_frames(cfg, container, report), described, ring, None, report, os.getppid())
    assert ring.ended, "the ring is marked ended before the stream's work hears of the end"
    return ring.frames, [events.get() for _ in range(events.qsize())]


def test_frames_that_change_size_go_on_as_a_new_shot_said_once_per_size(tmp_path):
    parts = ((0, (64, 48)), (2, (96, 72)), (4, (64, 48)), (6, (96, 72)))
    frames, told = emitted(joined_recordings(tmp_path / "resized.ts", parts))
    shots = [shot for _, shot in frames]  # no pair across a change (FFmpeg loses a part's last frame or so there)
    assert len(frames) > 70 and shots == sorted(shots) and set(shots) == {0, 1, 2, 3}
    assert {size for size, _ in frames} == {(64, 48)}  # of the same shape: scaled to the picture the first decided
    assert [m for m in told if isinstance(m, SourceResized)] == [SourceResized((64, 48), (96, 72), 2.0, (64, 48), True)]


def test_frames_of_another_shape_turn_the_picture(tmp_path):
    # A phone turned on its side and back: squashed into the first frame's picture, a portrait's motion would be
    # learned and shown warped.
    parts = ((0, (64, 48)), (2, (48, 64)), (4, (64, 48)))
    frames, told = emitted(joined_recordings(tmp_path / "turned.ts", parts))
    sizes = {shot: size for size, shot in frames}
    assert sizes == {0: (64, 48), 1: (48, 64), 2: (64, 48)}
    assert [m for m in told if isinstance(m, SourceResized)] == [
        SourceResized((64, 48), (48, 64), 2.0, (48, 64), True),
        SourceResized((48, 64), (64, 48), 4.0, (64, 48), False),  # a size seen before: said, not noted again
    ]


def test_a_webcams_jpegs_decode_at_each_size_it_sends(tmp_path):
    jpegs: queue.Queue = queue.Queue()
    for width, height in ((64, 48), (64, 48), (96, 72), (96, 72)):
        jpegs.put(cv2.imencode(".jpg", np.zeros((height, width, 3), np.uint8))[1].tobytes())
    cfg = DecoderConfig(SourceSpec("webcam", "", live=True), None, 30.0, 640, False, 5.0, 0.1)
    frames = []
    with pytest.raises(SourceError):  # the browser sent nothing more: stalled
        for frame in _webcam_frames(cfg, jpegs, type("Ring", (), {"stopping": False})()):
            frames.append(frame)
    assert [upright_size(f[0]) for f in frames] == [(64, 48), (64, 48), (96, 72), (96, 72)]  # then as a file's


def test_a_paced_frame_waits_for_its_time_and_a_late_one_moves_the_schedule_on():
    schedule = Schedule(10.0, now=100.0)
    assert schedule.wait(10.5, now=100.1) == pytest.approx(0.4)
    assert schedule.wait(11.0, now=101.0 + LATE_S / 2) == 0  # a little late: the schedule holds
    assert schedule.wait(11.5, now=101.5) == 0  # back on time
    assert schedule.wait(12.0, now=102.0 + 2 * LATE_S) == 0  # a segment that came late
    assert schedule.wait(12.5, now=102.0 + 2 * LATE_S) == pytest.approx(0.5)  # its next frame keeps its interval


def test_bad_rate():
    with pytest.raises(ValueError):
        Resampler(0)


def test_frame_time_and_scaling():
    frame = av.VideoFrame.from_ndarray(np.full((48, 64, 3), 100, np.uint8), format="rgb24")
    assert FrameClock(0.5)(frame, 3) == 1.5  # no timestamp: index × nominal interval
    assert to_rgb(frame).shape == (48, 64, 3)
    small = to_rgb(frame, 32, 24)
    assert small.shape == (24, 32, 3) and small.dtype == np.uint8 and abs(int(small[12, 16, 0]) - 100) <= 2


def shown_by_ffmpeg(path: Path, size: tuple[int, int]) -> np.ndarray:
    """The first frame as FFmpeg's own player shows it (it turns a video by its display matrix by default), RGB of
    the ``size`` it shows it at."""
    out = subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-i", str(path), "-frames:v", "1", "-f",
                          "rawvideo", "-pix_fmt", "rgb24", "-"], capture_output=True, check=True).stdout  # fmt: skip
    return np.frombuffer(out, np.uint8).reshape(size[1], size[0], 3)


@pytest.mark.skipif(NO_FFMPEG is not None, reason=str(NO_FFMPEG))
@pytest.mark.parametrize("degrees", [90, 180, 270])
def test_a_turned_video_comes_out_upright_as_players_show_it(tmp_path, degrees):
    frames = np.stack([cv2.resize(f, (96, 64)) for f in generate(64, 2, seed=3).frames])
    write_mp4(frames, tmp_path / "landscape.mp4", fps=10)
    turned = turned_copy(tmp_path / "landscape.mp4", tmp_path / "turned.mp4", degrees)
    with av.open(str(turned)) as container:
        frame = next(container.decode(video=0))
    size = (64, 96) if degrees % 180 else (96, 64)
    assert upright_size(frame) == size
    rgb = to_rgb(frame)
    expected = shown_by_ffmpeg(turned, size)
    assert rgb.shape == expected.shape == (size[1], size[0], 3)
    assert np.abs(rgb.astype(int) - expected).mean() < 3  # the same picture, up to the colour conversion
    assert np.abs(np.rot90(rgb, 2).astype(int) - expected).mean() > 20  # turned the other way it would not be
    assert to_rgb(frame, size[0] // 2, size[1] // 2).shape == (size[1] // 2, size[0] // 2, 3)  # scaled upright
