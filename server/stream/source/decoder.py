"""The decoder process: open a source with PyAV, deliver RGB frames of the picture's size at the stream's rate.

The first decoded frame decides both (``sizing``): the picture keeps the source's size up to a long side of
``display_side``, and the rate is the one asked for or the source's own (capped); the ``opened`` event says so, and
the stream's work then starts the learner process, which learns at a smaller size of its own. Frames of another shape
later (a phone turned) get a picture of their own (``FrameSizes``).

Resampling is by timestamps (``resample.Resampler``, shared with ``bench.realflow``): a decoded frame is emitted
when it falls on the next tick of the 1/fps grid (within a quarter tick), otherwise dropped and counted
(``reason="resample"``); nothing is ever duplicated, so a slower source just yields fewer frames. Recordings are
paced in real time: files (optionally looping) and URLs whose source states its length (a file over HTTP: its
duration, or its size in bytes where its format states no duration, as MPEG-TS; a finished HLS playlist), which
would otherwise arrive as fast as they download, and end the stream at their end;
live sources arrive in real time by themselves, and their end is retried. Live HLS and DASH arrive a segment at a
time and are paced as recordings are (``opening.SEGMENTED_FORMATS``). Frames go into the shared-memory ring; counts and
state go to the stream's work on the ``events`` queue. Failures end the process with an error event carrying a code
from ``errors`` — the stream's work decides whether to reconnect.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import av

from ... import errors
from ...errors import SourceError, in_words
from ..protocol import DecoderFailed, DecoderMessage, DecoderStats, SourceEnded, SourceOpened, SourceResized
from ..ring import FrameRing, RingSpec
from ..sizing import Size, picture_for, stream_fps
from .http_io import HttpOpener
from .opening import SEGMENTED_FORMATS, describe, log_failure, open_container, video_stream
from .resample import ContinuousClock, FrameClock, Resampler, nominal_interval, to_rgb, upright_size
from .sources import SourceSpec

log = logging.getLogger(__name__)

STATS_PERIOD_S = 0.25
#: A paced frame later than this (a segment that came late, a busy machine) moves the schedule on instead of rushing
#: the frames after it out to catch up, which the ring would drop.
LATE_S = 0.5
MAX_BAD_PACKETS = 25  # corrupt packets in a row before a source counts as broken (decode_error)
#: A decoded frame, its source time and position in the file (seconds), and its shot: how many times a looping file
#: has started again (its first frame again follows its last: no motion between them).
Frame = tuple[av.VideoFrame, float, float, int]


@dataclass(frozen=True)
class DecoderConfig:
    """What the decoder process needs (picklable): built by ``stream.config.decoder_config``."""

    source: SourceSpec
    fps: float | None  # asked for; None: the source's own rate, at most ``max_fps``
    max_fps: float
    display_side: int  # the picture's long side at most (``sizing.display_size``)
    loop: bool
    open_timeout_s: float
    read_timeout_s: float
    start_at_s: float = 0.0  # resume position inside a file after a restart

    @property
    def timeouts(self) -> tuple[float, float]:
        """To open the source, and to read from it (PyAV's ``timeout``)."""
        return self.open_timeout_s, self.read_timeout_s


class Reporter:
    """Batches counts to the stream's work (a few messages a second, also a heartbeat)."""

    def __init__(self, events: Any) -> None:
        self.events = events
        self.decoded = 0
        self.dropped: dict[str, int] = {}
        self.position = 0.0
        self._last = time.monotonic()

    def drop(self, reason: str, n: int = 1) -> None:
        if n:
            self.dropped[reason] = self.dropped.get(reason, 0) + n

    def tick(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < STATS_PERIOD_S:
            return
        self._last = now
        if self.decoded or self.dropped or force:
            self.events.put(DecoderStats(self.decoded, self.dropped, self.position))
            self.decoded, self.dropped = 0, {}

    def send(self, message: DecoderMessage) -> None:
        self.tick(force=True)
        self.events.put(message)


class FrameSizes:
    """The frames' upright size as they come, and the picture they are shown in (``sizing.picture_for``: the first
    frame's; frames of another shape, a phone turned, get one of their own; frames of the same shape are scaled to
    it). Frames of another size begin a new shot: no pair across the change (another camera's segment, another
    encoding, a webcam's new mode, a turn). The stream's work hears of each new size, and of every turn of the
    picture; a looping file's sizes at every loop only where they turn it."""

    def __init__(self, report: Reporter, max_side: int) -> None:
        self.report = report
        self.max_side = max_side
        self.size: Size | None = None
        self.picture: Size | None = None
        self.seen: set[Size] = set()

    def changed(self, frame: av.VideoFrame, at: float) -> bool:
        """Whether ``frame``, at ``at`` seconds of the stream, is of another size than the frame before."""
        upright = upright_size(frame)
        changed = self.size is not None and upright != self.size
        picture, self.picture = self.picture, picture_for(upright, self.picture, self.max_side)
        if changed and (upright not in self.seen or self.picture != picture):
            self.report.send(SourceResized(self.size, upright, at, self.picture, upright not in self.seen))
        self.size = upright
        self.seen.add(upright)
        return changed


class Schedule:
    """When a paced frame is due on the monotonic clock: at its source time after the first frame's. A frame later
    than ``LATE_S`` moves the schedule on by its lateness, so the frames after it keep their intervals."""

    def __init__(self, t0: float, now: float) -> None:
        self.wall0 = now - t0

    def wait(self, t: float, now: float) -> float:
        """Seconds until the frame at source time ``t`` is due (0: now)."""
        delay = self.wall0 + t - now
        if delay < -LATE_S:
            self.wall0 -= delay
        return max(delay, 0.0)


def run_decoder(cfg: DecoderConfig, ring_spec: RingSpec, slots: Any, events: Any, ingest: Any) -> None:
    """Process entry point. Frames wait until the learner is ready (a ring flag); ``ingest`` carries webcam JPEGs."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the stream's work stops us through the ring's stop flag
    av.logging.set_level(av.logging.PANIC)
    parent = os.getppid()
    ring = FrameRing.attach(ring_spec)
    slots.cancel_join_thread()  # unread slot indices are worthless once we exit
    report = Reporter(events)
    try:
        described: dict = {}
        frames = _frames(cfg, report, ingest, ring, described)
        _emit(cfg, frames, described, ring, slots, report, parent)
    except SourceError as exc:
        report.send(DecoderFailed(exc.code, exc.message))
    except Exception as exc:  # an unexpected failure still gets a code, never a silent death
        log.exception("decoder failed")
        report.send(DecoderFailed(errors.DECODE_ERROR, f"decoding failed: {in_words(exc)}"))
    finally:
        ring.close()


def _emit(
    cfg: DecoderConfig,
    frames: Iterator[Frame],
    described: dict,
    ring: FrameRing,
    slots: Any,
    report: Reporter,
    parent: int,
) -> None:
    """Pace and resample the frames into the ring at the picture's size (``FrameSizes``). The first frame decides the
    picture's size and the rate (``opened``); frames wait there until the learner is ready."""
    grid: Resampler | None = None
    schedule, recording, paced = Schedule(0.0, 0.0), not cfg.source.live, False  # decided by the first frame
    sizes, resized = FrameSizes(report, cfg.display_side), 0
    for frame, t, position, shot in frames:
        if ring.stopping or os.getppid() != parent:
            return
        report.decoded += 1
        resized += sizes.changed(frame, t)
        assert sizes.picture is not None and sizes.size is not None
        width, height = sizes.picture
        if grid is None:
            fps = stream_fps(cfg.fps, described.get("fps"), cfg.max_fps)
            info = {**described, "width": sizes.size[0], "height": sizes.size[1]}
            recording = _recording(cfg, described)
            paced = recording or described.get("container") in SEGMENTED_FORMATS
            report.send(SourceOpened(info, fps, (width, height)))
            grid = Resampler(fps)
            while not ring.ready:
                if ring.sleep(0.05):
                    return
            schedule = Schedule(t, time.monotonic())
        if not grid.keep(t):
            report.drop("resample")
        else:
            if paced and (delay := schedule.wait(t, time.monotonic())) > 0 and ring.sleep(delay):
                return
            rgb = to_rgb(frame, width, height)  # only kept frames are converted
            report.drop("worker_behind", ring.write(rgb, time.time(), t, slots, shot + resized))
            report.position = position
        report.tick()
    ring.set_ended()  # before the message: the learner learns what the ring holds, then says so
    report.send(SourceEnded(live=not recording))


# -- frame sources ------------------------------------------------------------------------------
def _frames(cfg: DecoderConfig, report: Reporter, ingest: Any, ring: FrameRing, described: dict) -> Iterator[Frame]:
    """Decoded frames with their monotonic source time and position in the file; ``described`` gets what the
    source says about itself (codec, nominal rate) once it is open."""
    if cfg.source.kind == "webcam":
        described["codec"] = "mjpeg"
        yield from _webcam_frames(cfg, ingest, ring)
        return
    with contextlib.ExitStack() as stack:
        opener = None
        if cfg.source.kind == "http":
            opener = stack.enter_context(HttpOpener(cfg.source.policy, *cfg.timeouts))

        def opened() -> av.container.InputContainer:
            return stack.enter_context(open_container(cfg.source, cfg.timeouts, opener))

        container = opened()
        described.update(describe(container, video_stream(container, cfg.display_side)))
        if opener and opener.source_length is not None and described.get("container") not in SEGMENTED_FORMATS:
            # A body of a stated length is a file, a recording, though its format states no duration (MPEG-TS);
            # a live stream's has none. A playlist has one of its own whether the stream is live or not.
            described["length_bytes"] = opener.source_length
        # A URL's recording loops by asking for it again: its body cannot seek.
        again = opened if opener and _recording(cfg, described) else None
        yield from _container_frames(cfg, container, report, again)


def _recording(cfg: DecoderConfig, described: dict) -> bool:
    """Whether the source is a recording (paced in real time, ended at its end, looped where asked), not live: a file,
    or a URL whose source states its length (its duration, or its size where its format states no duration)."""
    return not cfg.source.live or described.get("duration_s") is not None or "length_bytes" in described


def _decoded(container: av.container.InputContainer, stream: Any, report: Reporter) -> Iterator[av.VideoFrame]:
    """The stream's frames. A packet that does not decode (corrupt bytes) is skipped and counted
    (``reason="decode_error"``); only ``MAX_BAD_PACKETS`` in a row end the stream — then it really is broken."""
    bad = 0
    for packet in container.demux(stream):
        try:
            frames = packet.decode()
        except av.error.InvalidDataError:
            bad += 1
            report.drop("decode_error")
            if bad >= MAX_BAD_PACKETS:
                raise
            continue
        bad = 0
        yield from frames


def _container_frames(
    cfg: DecoderConfig,
    container: av.container.InputContainer,
    report: Reporter,
    again: Callable[[], av.container.InputContainer] | None = None,
) -> Iterator[Frame]:
    """The container's frames, from its start again at its end where the stream loops: a file's by seeking, a URL's
    recording by ``again`` (opening it anew)."""
    loops = cfg.loop and (not cfg.source.live or again is not None)
    stream = video_stream(container, cfg.display_side)
    if cfg.start_at_s > 0 and not cfg.source.live:
        container.seek(int(cfg.start_at_s / stream.time_base), stream=stream)
    skip_until = 0.0 if cfg.source.live else cfg.start_at_s
    last_at, shot = time.monotonic(), 0
    step = nominal_interval(stream)
    # A live stream that states no rate (MJPEG over HTTP) has its frames numbered by FFmpeg at a rate it guessed (25
    # fps, whatever the camera sends): their arrival is their time, as a webcam's is.
    arrival, opened = cfg.source.live and not stream.average_rate, time.monotonic()
    continuous = ContinuousClock(step)  # the source time; the position stays the file's own (a resume seeks to it)
    try:
        while True:
            count, clock = 0, FrameClock(step)  # a loop starts the timestamps afresh
            for frame in _decoded(container, stream, report):
                t = time.monotonic() - opened if arrival else clock(frame, count)
                at = continuous(t)
                if t < skip_until:
                    continue
                count, last_at = count + 1, time.monotonic()
                yield frame, at, t, shot
            if not loops or (count == 0 and not skip_until):
                return  # the end (an empty video never loops)
            if again is None:
                container.seek(0, stream=stream)
            else:
                container.close()  # its connection
                container = again()
                stream = video_stream(container, cfg.display_side)
            continuous.restart()
            shot += 1
            skip_until = 0.0
    except SourceError:
        raise
    except (av.error.FFmpegError, OSError) as exc:
        # A read timeout surfaces as whatever the protocol makes of it (EIO, "ends prematurely", exit requested):
        # a live source that went silent for the read timeout before failing has stalled.
        # PyAV's own timeout interrupts the read: that is "Immediate exit requested" (ExitError).
        log_failure("reading the source failed", exc, cfg.source.target)
        silent = time.monotonic() - last_at
        if isinstance(exc, av.error.ExitError) or (cfg.source.live and silent >= 0.8 * cfg.read_timeout_s):
            raise SourceError(errors.STALLED, f"no data from the source for {silent:.1f} s") from exc
        raise SourceError(errors.DECODE_ERROR, f"decoding failed: {in_words(exc)}") from exc


def _webcam_frames(cfg: DecoderConfig, ingest: Any, ring: FrameRing) -> Iterator[Frame]:
    """JPEGs pushed by a browser over ``/ws/streams/{id}/ingest``; their arrival time is their timestamp."""
    codec = av.CodecContext.create("mjpeg", "r")
    t0 = time.monotonic()
    while not ring.stopping:
        try:
            data = ingest.get(timeout=cfg.read_timeout_s)
        except queue.Empty:
            raise SourceError(errors.STALLED, f"no webcam frame for {cfg.read_timeout_s:g} s") from None
        try:
            decoded = codec.decode(av.Packet(data))
        except av.error.FFmpegError as exc:
            log.warning("a webcam frame did not decode: %s", exc)
            raise SourceError(errors.DECODE_ERROR, "a webcam frame is not a JPEG image") from exc
        for frame in decoded:
            yield frame, time.monotonic() - t0, 0.0, 0
