"""The shared-memory frame ring: ordered delivery with capture time and shot, drop-oldest when the reader is behind,
torn reads detected, and the source's end known only once every frame queued was read."""

from __future__ import annotations

import collections
import multiprocessing as mp
import queue

import numpy as np
import pytest

from server.stream.ring import FrameRing

CTX = mp.get_context("spawn")


@pytest.fixture
def ring():
    r = FrameRing.create(4, 8, 8)
    yield r
    r.close()


def frame(value: int) -> np.ndarray:
    return np.full((8, 8, 3), value, np.uint8)


def test_frames_arrive_in_order_with_their_times_shot_and_number(ring):
    q = CTX.Queue(ring.queue_size)
    for i in range(2):
        assert ring.write(frame(i), 100.0 + i, 0.5 * i, q, shot=3 * i) == 0
    for i in range(2):
        got, t, shot, seq, source_time = ring.read(q, timeout=5)
        assert (got == i).all() and t == 100.0 + i and shot == 3 * i and seq == i and source_time == 0.5 * i
    assert ring.read(q, timeout=0.05) is None


def test_a_full_queue_drops_the_oldest_unread_frame(ring):
    q = CTX.Queue(ring.queue_size)  # 2 unread frames at most
    dropped = [ring.write(frame(i), float(i), float(i), q) for i in range(5)]
    assert sum(dropped) == 3
    got = [ring.read(q, timeout=5) for _ in range(2)]
    assert [int(g[0][0, 0, 0]) for g in got] == [3, 4]  # the newest survive
    assert [g[3] for g in got] == [3, 4]  # and their numbers say how many the reader missed


def test_an_overwritten_slot_is_reported_not_torn(ring):
    q = CTX.Queue(ring.queue_size)
    ring.write(frame(1), 1.0, 1.0, q)
    slot, seq = q.get(timeout=5)
    ring.header[slot, 0] = seq + 4  # the writer lapped the reader on this slot
    stale = CTX.Queue(2)
    stale.put((slot, seq))
    assert ring.read(stale, timeout=5) is False


def test_other_processes_attach_by_spec(ring):
    q = CTX.Queue(ring.queue_size)
    proc = CTX.Process(target=_write_one, args=(ring.spec, q))
    proc.start()
    proc.join(60)
    got, t, shot, _, _ = ring.read(q, timeout=5)
    assert (got == 7).all() and t == 7.0 and shot == 0
    with pytest.raises(queue.Empty):
        q.get_nowait()


def _write_one(spec, q) -> None:
    r = FrameRing.attach(spec)
    r.write(frame(7), 7.0, 7.0, q)
    r.close()


def test_frames_of_any_size_within_the_capacity(ring):
    q = CTX.Queue(ring.queue_size)
    small = np.arange(4 * 6 * 3, dtype=np.uint8).reshape(4, 6, 3)
    ring.write(small, 1.0, 1.0, q)
    got = ring.read(q, timeout=5).pixels
    assert got.shape == (4, 6, 3) and np.array_equal(got, small)
    with pytest.raises(ValueError, match="does not fit"):
        ring.write(np.zeros((9, 8, 3), np.uint8), 2.0, 2.0, q)


class LateQueue:
    """A queue whose items reach the reader only when ``deliver`` is called: a ``multiprocessing.Queue`` hands an item
    to its feeder thread, and a loaded machine may run that thread well after the writer went on."""

    def __init__(self) -> None:
        self.sent: collections.deque = collections.deque()
        self.delivered: queue.Queue = queue.Queue()

    def put_nowait(self, item) -> None:
        self.sent.append(item)

    def deliver(self) -> None:
        while self.sent:
            self.delivered.put(self.sent.popleft())

    def get(self, timeout: float):
        return self.delivered.get(timeout=timeout)


def test_the_end_waits_for_the_frames_queued_before_it_however_late_they_arrive(ring):
    q = LateQueue()
    for i in range(2):
        ring.write(frame(i), float(i), float(i), q)
    ring.set_ended()  # seen by the reader at once, before the queue delivers the frames written before it
    assert ring.read(q, timeout=0.01) is None and not ring.drained
    q.deliver()
    assert ring.read(q, timeout=5).seq == 0 and not ring.drained
    assert ring.read(q, timeout=5).seq == 1 and ring.drained


def test_the_end_counts_frames_dropped_or_overwritten_as_read(ring):
    q = CTX.Queue(ring.queue_size)
    for i in range(5):  # three of them dropped: the queue holds two
        ring.write(frame(i), float(i), float(i), q)
    ring.set_ended()
    assert ring.read(q, timeout=5).seq == 3 and not ring.drained
    slot, seq = q.get(timeout=5)
    ring.header[slot, 0] = seq + 4  # lapped: the last frame's slot holds a newer one
    stale = CTX.Queue(2)
    stale.put((slot, seq))
    assert ring.read(stale, timeout=5) is False and ring.drained
