"""A shared-memory frame ring: pixels live in ``multiprocessing.shared_memory``; only ``(slot, seq)`` travel on a
bounded queue from the decoder to the worker.

The decoder writes frame ``seq`` into slot ``seq % slots``. The queue holds at most ``slots - 2`` unread
frames, so the slot being written never holds a queued frame; when the queue is full the decoder drops the
oldest unread frame (the worker is behind). Each slot header carries the sequence number of the frame in it
(-1 while being written): the reader checks it before and after copying — a seqlock — so a slot that was
overwritten under it is detected and counted as dropped instead of handing out torn pixels.

The source's end is a flag in shared memory, which the reader sees at once, while a queued ``(slot, seq)`` reaches the
reader's end of the queue only when the writer's feeder thread gets to it: so the ring also records how far the
writer queued, and the reader has read everything only once it has taken that far (``drained``), however late the
queue delivers the last frame.

A slot holds a frame of any size up to the ring's capacity and records that size: the ring is made before the
source opens, and only the decoder learns the picture's size (from the first frame). It also records the frame's shot:
a count the decoder raises where the video starts afresh (a looping file's first frame again), so the worker pairs
the first frame it reads of a new shot with itself, even when the shot's own first frame was dropped.
"""

from __future__ import annotations

import queue
import time
from dataclasses import dataclass
from multiprocessing import shared_memory
from typing import Any, NamedTuple

import numpy as np

POLL_S = 0.02
WRITING = -1.0
SEQ, CAPTURE, SOURCE, HEIGHT, WIDTH, SHOT = range(6)  # header columns of a slot
QUEUED = 1  # the next-seq row's second column: one past the last frame the writer queued
COLUMNS = 6
NEXT_SEQ, FLAGS = -2, -1  # header rows after the slots: (next seq, queued through) and the flags
STOP, READY, WANTED, ENDED = range(4)  # flag columns: stop requested, worker ready, pictures viewers want (a bit
# mask), the source ended (no frame follows those written)


class RingFrame(NamedTuple):
    """A frame as the worker reads it."""

    pixels: np.ndarray  # uint8 [H, W, 3]
    capture_time: float  # when the decoder wrote it (Unix seconds): latency
    shot: int  # the decoder's count of fresh starts (a looping file's restarts)
    seq: int  # every frame the decoder wrote has the next number, read or not: the frames the worker skipped
    source_time: float  # on the source's own clock (seconds, rising): its pace, whatever the decoder's speed


@dataclass(frozen=True)
class RingSpec:
    """Everything a process needs to attach to a ring (picklable). ``height`` x ``width`` is the capacity of a slot."""

    name: str
    slots: int
    height: int
    width: int

    @property
    def header_bytes(self) -> int:
        # Per slot (seq, capture time, source time, height, width, shot); then (next seq), the flags.
        return (self.slots + 2) * COLUMNS * 8

    @property
    def frame_bytes(self) -> int:
        return self.height * self.width * 3


class FrameRing:
    def __init__(self, spec: RingSpec, shm: shared_memory.SharedMemory, owner: bool) -> None:
        self.spec = spec
        self._shm = shm
        self._owner = owner
        self.header = np.ndarray((spec.slots + 2, COLUMNS), np.float64, shm.buf, 0)
        self.frames = np.ndarray((spec.slots, spec.frame_bytes), np.uint8, shm.buf, spec.header_bytes)
        self.read_through = 0  # the reader's side: one past the last frame it took from the queue

    @classmethod
    def create(cls, slots: int, height: int, width: int) -> FrameRing:
        if slots < 3:
            raise ValueError("a ring needs at least 3 slots (one written, one read, one queued)")
        probe = RingSpec("", slots, height, width)
        shm = shared_memory.SharedMemory(create=True, size=probe.header_bytes + slots * probe.frame_bytes)
        ring = cls(RingSpec(shm.name, slots, height, width), shm, owner=True)
        ring.header[:] = 0
        ring.header[:slots, SEQ] = WRITING
        return ring

    @classmethod
    def attach(cls, spec: RingSpec) -> FrameRing:
        return cls(spec, shared_memory.SharedMemory(name=spec.name), owner=False)

    @property
    def queue_size(self) -> int:
        return self.spec.slots - 2

    # -- flags: plain shared memory, not multiprocessing.Event (whose set() hangs once a waiter was killed) -----
    def request_stop(self) -> None:
        self.header[FLAGS, STOP] = 1.0

    @property
    def stopping(self) -> bool:
        return bool(self.header[FLAGS, STOP])

    def set_ready(self) -> None:
        self.header[FLAGS, READY] = 1.0

    @property
    def ready(self) -> bool:
        return bool(self.header[FLAGS, READY])

    def set_ended(self) -> None:
        self.header[FLAGS, ENDED] = 1.0

    @property
    def drained(self) -> bool:
        """The decoder wrote its last frame, and the reader took from the queue every frame queued."""
        return bool(self.header[FLAGS, ENDED]) and self.read_through >= self.header[NEXT_SEQ, QUEUED]

    @property
    def wanted(self) -> int:
        """A bit mask the stream's work sets and the worker reads: which pictures some viewer wants now."""
        return int(self.header[FLAGS, WANTED])

    @wanted.setter
    def wanted(self, mask: int) -> None:
        self.header[FLAGS, WANTED] = float(mask)

    def sleep(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; True (early) when a stop was requested."""
        deadline = time.monotonic() + seconds
        while not self.stopping:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(left, POLL_S))
        return True

    def _pixels(self, slot: int, height: int, width: int) -> np.ndarray:
        return self.frames[slot, : height * width * 3].reshape(height, width, 3)

    # -- decoder side ----------------------------------------------------------------------------
    def write(self, frame: np.ndarray, capture_time: float, source_time: float, slots_queue: Any, shot: int = 0) -> int:
        """Publish ``frame`` (uint8 [H, W, 3], within the capacity) of ``shot``, captured at ``capture_time`` (Unix
        seconds) and at ``source_time`` on the source's own clock (seconds, rising); return how many unread frames were
        dropped to make room (0 or more)."""
        height, width = frame.shape[:2]
        if height * width * 3 > self.spec.frame_bytes:
            raise ValueError(f"a {width}x{height} frame does not fit a ring of {self.spec.width}x{self.spec.height}")
        seq = int(self.header[NEXT_SEQ, SEQ])
        self.header[NEXT_SEQ, SEQ] = seq + 1
        slot = seq % self.spec.slots
        self.header[slot, SEQ] = WRITING
        self._pixels(slot, height, width)[:] = frame
        self.header[slot, CAPTURE:] = (capture_time, source_time, height, width, shot)
        self.header[slot, SEQ] = seq
        dropped = 0
        for _ in range(self.spec.slots):
            try:
                slots_queue.put_nowait((slot, seq))
                self.header[NEXT_SEQ, QUEUED] = seq + 1
                return dropped
            except queue.Full:
                try:
                    slots_queue.get(timeout=0.01)  # the oldest unread frame goes (a timeout: the pipe may lag)
                    dropped += 1
                except queue.Empty:
                    pass
        return dropped + 1  # could not even queue this one

    # -- worker side -----------------------------------------------------------------------------
    def read(self, slots_queue: Any, timeout: float) -> RingFrame | None | bool:
        """The next frame; None on timeout; False when its slot was overwritten."""
        try:
            slot, seq = slots_queue.get(timeout=timeout)
        except queue.Empty:
            return None
        self.read_through = seq + 1  # the queue is in order: every frame queued before this one was taken too
        if self.header[slot, SEQ] != seq:
            return False
        capture_time, source_time, height, width, shot = self.header[slot, CAPTURE:]
        frame = self._pixels(slot, int(height), int(width)).copy()
        if self.header[slot, SEQ] != seq:
            return False
        return RingFrame(frame, float(capture_time), int(shot), seq, float(source_time))

    # -- lifetime --------------------------------------------------------------------------------
    def close(self) -> None:
        del self.header, self.frames
        self._shm.close()
        if self._owner:
            self._shm.unlink()
