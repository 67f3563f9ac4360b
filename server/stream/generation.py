"""A generation of a stream: one shared-memory ring, fresh queues, one decoder and one learner process.

Why fresh each time: a process killed while holding a ``multiprocessing.Queue`` lock would wedge whoever uses that
queue next, so a failed generation is dropped whole and the next one starts clean (``supervisor.py`` supervises).

Both processes are forked from the service's fork server (``fork_server.py``), where there is one.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

from .fork_server import CONTEXT
from .learner.process import run_learner_process
from .learner.process_config import LearnerProcessConfig
from .protocol import DecoderMessage, LearnerMessage
from .ring import FrameRing
from .source.decoder import DecoderConfig, run_decoder

RING_SLOTS = 4
LEARNER_STOP_S = 20.0  # room for the final checkpoint


class Generation:
    """One ring, its queues, one decoder and (once the source opened) one learner process.

    Reader threads move the processes' messages into ``inbox``: a process killed halfway through writing a
    message would block a direct reader forever; here it strands only its own reader thread. Flags go through
    the ring's shared memory, not ``multiprocessing.Event``, whose ``set()`` hangs once a waiter was killed.
    """

    def __init__(self, ring: FrameRing, label: str, dcfg: DecoderConfig) -> None:
        self.ring, self.label = ring, label
        self.slots = CONTEXT.Queue(ring.queue_size)
        self.events, self.out, self.control, self.ingest = (
            CONTEXT.Queue(),
            CONTEXT.Queue(),
            CONTEXT.Queue(),
            CONTEXT.Queue(2),
        )
        self.decoder = CONTEXT.Process(target=run_decoder, args=(dcfg, ring.spec, self.slots, self.events, self.ingest),
                                       name=f"overtime-decoder-{label}", daemon=True)  # fmt: skip
        self.learner: Any = None  # the learner process, once started
        self.started = time.monotonic()
        self.inbox: queue.Queue[DecoderMessage | LearnerMessage] = queue.Queue()
        self._done = threading.Event()
        self._readers = [
            (q, threading.Thread(target=self._read, args=(q,), daemon=True)) for q in (self.out, self.events)
        ]
        for _, thread in self._readers:
            thread.start()

    @classmethod
    def start(cls, dcfg: DecoderConfig, ring: FrameRing, label: str) -> Generation:
        """Fresh queues and the decoder started; the learner process starts once the source opened
        (``start_learner``): its configuration depends on the picture's size and rate, and a bad source never costs a
        pipeline."""
        gen = cls(ring, label, dcfg)
        gen.decoder.start()
        return gen

    def start_learner(self, lcfg: LearnerProcessConfig) -> None:
        args = (lcfg, self.ring.spec, self.slots, self.out, self.control)
        name = f"overtime-learner-{self.label}"
        self.learner = CONTEXT.Process(target=run_learner_process, args=args, name=name, daemon=True)
        self.learner.start()

    @property
    def learner_pid(self) -> int | None:
        return self.learner.pid if self.learner is not None else None

    @property
    def learner_alive(self) -> bool:
        """The learner process is up and learning (its pipeline built): it can answer control requests."""
        return self.ring.ready and self.learner is not None and self.learner.is_alive()

    def _read(self, q: Any) -> None:
        while True:
            try:
                message = q.get(timeout=0.1)
            except queue.Empty:
                if self._done.is_set():
                    return
                continue
            except (OSError, EOFError, ValueError):
                return
            self.inbox.put(message)

    def shutdown(self) -> None:
        """Stop both processes (the learner checkpoints on the way out), then free the queues and the ring."""
        self.ring.request_stop()
        learner = self.learner
        if learner is not None and not self.ring.ready and learner.is_alive():
            learner.kill()  # still building its pipeline: nothing learned, nothing to save
        if learner is not None:
            learner.join(LEARNER_STOP_S)
        self.decoder.join(3.0)
        for proc in (learner, self.decoder):
            if proc is not None and proc.pid is not None and proc.is_alive():
                proc.kill()
                proc.join(3.0)
        self._done.set()
        queues = [self.slots, self.control, self.ingest]
        for q, thread in self._readers:
            thread.join(2.0)
            if not thread.is_alive():  # a reader stuck on a half-written message keeps its queue (and fd)
                queues.append(q)
        for q in queues:
            q.cancel_join_thread()  # never block this thread on a queue whose reader is gone
            q.close()
        self.ring.close()
