"""A generation of a stream: one shared-memory ring, fresh queues, one decoder and one worker process.

Why fresh each time: a process killed while holding a ``multiprocessing.Queue`` lock would wedge whoever uses that
queue next, so a failed generation is dropped whole and the next one starts clean (``session.py`` supervises).
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import threading
import time
from typing import Any

from .decoder import DecoderConfig, run_decoder
from .ring import FrameRing
from .worker import WorkerConfig, run_worker

RING_SLOTS = 4
WORKER_STOP_S = 20.0  # room for the final checkpoint
SPAWN = mp.get_context("spawn")  # never fork a process that runs threads (uvicorn, torch)


class Generation:
    """One ring, its queues, one decoder and one worker.

    Reader threads move the processes' messages into ``inbox``: a process killed halfway through writing a
    message would block a direct reader forever; here it strands only its own reader thread. Flags go through
    the ring's shared memory, not ``multiprocessing.Event``, whose ``set()`` hangs once a waiter was killed.
    """

    def __init__(self, ring: FrameRing, slots: Any, events: Any, out: Any, control: Any, ingest: Any,
                 decoder: Any, worker: Any) -> None:  # fmt: skip
        self.ring, self.slots, self.control, self.ingest = ring, slots, control, ingest
        self.decoder, self.worker = decoder, worker
        self.started = time.monotonic()
        self.inbox: queue.Queue[tuple[str, dict]] = queue.Queue()
        self._done = threading.Event()
        self._readers = {
            tag: (q, threading.Thread(target=self._read, args=(q, tag), daemon=True))
            for tag, q in (("worker", out), ("decoder", events))
        }
        for _, thread in self._readers.values():
            thread.start()

    @classmethod
    def start(cls, dcfg: DecoderConfig, wcfg: WorkerConfig, ring: FrameRing, label: str) -> Generation:
        """Fresh queues, both processes built, the decoder started: the worker starts once the source opened, so a
        bad source never costs a pipeline."""
        slots = SPAWN.Queue(ring.queue_size)
        events, out, control, ingest = SPAWN.Queue(), SPAWN.Queue(), SPAWN.Queue(), SPAWN.Queue(2)
        worker = SPAWN.Process(target=run_worker, args=(wcfg, ring.spec, slots, out, control),
                               name=f"overtime-worker-{label}", daemon=True)  # fmt: skip
        decoder = SPAWN.Process(target=run_decoder, args=(dcfg, ring.spec, slots, events, ingest),
                                name=f"overtime-decoder-{label}", daemon=True)  # fmt: skip
        decoder.start()
        return cls(ring, slots, events, out, control, ingest, decoder, worker)

    def _read(self, q: Any, tag: str) -> None:
        while True:
            try:
                message = q.get(timeout=0.1)
            except queue.Empty:
                if self._done.is_set():
                    return
                continue
            except (OSError, EOFError, ValueError):
                return
            self.inbox.put((tag, message))

    def shutdown(self) -> None:
        """Stop both processes (the worker checkpoints on the way out), then free the queues and the ring."""
        self.ring.request_stop()
        if not self.ring.ready and self.worker.is_alive():
            self.worker.kill()  # still building its pipeline: nothing learned, nothing to save
        if self.worker.pid is not None:
            self.worker.join(WORKER_STOP_S)
        self.decoder.join(3.0)
        for proc in (self.worker, self.decoder):
            if proc.pid is not None and proc.is_alive():
                proc.kill()
                proc.join(3.0)
        self._done.set()
        queues = [self.slots, self.control, self.ingest]
        for q, thread in self._readers.values():
            thread.join(2.0)
            if not thread.is_alive():  # a reader stuck on a half-written message keeps its queue (and fd)
                queues.append(q)
        for q in queues:
            q.cancel_join_thread()  # never block this thread on a queue whose reader is gone
            q.close()
        self.ring.close()
