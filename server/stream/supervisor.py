"""A stream's supervisor thread: it runs *generations* (``generation.py``) one after another. Each has a fresh
shared-memory ring, fresh queues and one decoder + one learner process. When either process fails (or a live source
drops), the whole generation is stopped — the learner saves a checkpoint on the way out — and a new one starts after
a back-off (``restart_policy``). Fresh queues each time matter: a process killed while holding a
``multiprocessing.Queue`` lock would wedge whoever uses that queue next. A file source resumes from its last
position; the learner from its checkpoint. What the processes send is applied by the ``MessageDispatcher``."""

from __future__ import annotations

import logging
import queue
import signal
import threading
import time
from pathlib import Path

from .. import errors
from ..settings import Settings
from .config import StreamConfig, decoder_config, learner_process_config
from .counts import StreamCounts
from .dispatch import MessageDispatcher
from .generation import LEARNER_STOP_S, RING_SLOTS, Generation
from .protocol import SourceOpened
from .restart_policy import HEALTHY_RUN_S, Backoff, Outcome, judge
from .ring import FrameRing
from .source.demo import ensure_demo
from .status import StreamStatus

log = logging.getLogger(__name__)
FINAL_DRAIN_S = 0.3  # a reader thread polls every 0.1 s
STALL_MARGIN_S = 5.0  # beyond the read timeout, before a stream without frames counts as stalled
CRASH_SIGNALS = {signal.SIGSEGV, signal.SIGFPE, signal.SIGABRT, signal.SIGBUS}


class StreamSupervisor:
    def __init__(self, sid: str, cfg: StreamConfig, settings: Settings, status: StreamStatus, counts: StreamCounts,
                 dispatcher: MessageDispatcher) -> None:  # fmt: skip
        self.sid, self.cfg, self.settings = sid, cfg, settings
        self.status, self.counts, self.dispatcher = status, counts, dispatcher
        self.gen: Generation | None = None  # the generation running now
        self.wanted = 0  # the pictures some viewer wants (``pictures.kinds_mask``): handed to the learner process
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"stream-{sid}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop the generation (the learner checkpoints) and wait for it."""
        self._closing.set()
        self._thread.join(LEARNER_STOP_S + 10)

    def _run(self) -> None:
        backoff = Backoff(self.settings.reconnect_max_s)
        while not self._closing.is_set():
            try:
                if self.cfg.spec.kind == "demo":
                    ensure_demo(Path(self.cfg.spec.target))
                self.gen = gen = self._start_generation()
            except Exception as exc:
                log.exception("stream %s could not start", self.sid)
                message = f"could not start the stream: {errors.in_words(exc)}"
                self.status.set_state("error", errors.WORKER_FAILED, message)
                return
            outcome = self._watch(gen)
            healthy = time.monotonic() - gen.started > HEALTHY_RUN_S and self.counts.counters.processed > 0
            gen.shutdown()
            self._relay(gen, final=True)  # what they sent on the way out (the final checkpoint) counts
            # The last references: once the generation is collected, multiprocessing unlinks its queues' semaphores
            # (/dev/shm/sem.*). Held on to, they would last as long as the server.
            self.gen = gen = None
            if not self._conclude(outcome):
                return
            if self._closing.wait(backoff.next_delay(healthy)):
                self.status.set_state("ended", None, "")
                return

    def _conclude(self, outcome: Outcome) -> bool:
        """Apply the verdict on an ended generation to the stream; True to start another one."""
        verdict = judge(outcome, self.cfg.spec.live)
        if verdict.counts_as == "learner_restart":
            self.counts.learner_restart()
        elif verdict.counts_as == "reconnect":
            self.counts.reconnect()
        if verdict.halve_lr and self.status.lr:
            self.status.lr /= 2
        self.status.set_state(verdict.state, verdict.code, verdict.message)
        return verdict.retry

    def _start_generation(self) -> Generation:
        self.dispatcher.new_generation()
        self.status.set_phase("opening the source")
        side = self.settings.display_side
        ring = FrameRing.create(RING_SLOTS, side, side)  # any picture of that long side fits
        try:
            return Generation.start(decoder_config(self.cfg, self.settings, self.status.position), ring, self.sid)
        except BaseException:
            ring.close()  # no generation owns it yet
            raise

    def _start_learner(self, gen: Generation) -> None:
        """Once the source opened: the learner's configuration depends on the picture's size and the rate."""
        status = self.status
        if gen.learner is None and status.display is not None and status.fps is not None:
            gen.start_learner(learner_process_config(self.cfg, self.settings, status.display, status.fps, status.lr))

    def _watch(self, gen: Generation) -> Outcome:
        """Relay messages until the generation must end; return why."""
        stall_s = self.settings.read_timeout_s + STALL_MARGIN_S
        while True:
            if self._closing.is_set():
                return Outcome("closing")
            if gen.ring.wanted != self.wanted:  # only this thread touches the ring, which it may close
                gen.ring.wanted = self.wanted  # the learner renders the pictures someone watches, no more
            outcome = self._relay(gen)
            if outcome is not None:
                return outcome
            learner = gen.learner
            if learner is not None and learner.pid is not None and not learner.is_alive():
                code = learner.exitcode
                crashed = code is not None and -code in CRASH_SIGNALS
                return self._relay(gen, final=True) or Outcome(
                    "learner",
                    errors.WORKER_CRASHED if crashed else errors.WORKER_DIED,
                    f"the worker process died (exit code {code})",
                )
            if (ended := self.dispatcher.overdue_end()) is not None:
                return ended
            if self.dispatcher.ending is not None:
                continue  # the decoder is done; the learner learns the frames it left
            if not gen.decoder.is_alive():
                outcome = self._relay(gen, final=True)  # its last messages: the source's end, or why it failed
                if outcome is not None:
                    return outcome
                if self.dispatcher.ending is None:
                    code = gen.decoder.exitcode
                    return Outcome("decoder", errors.DECODER_DIED, f"the decoder process died (exit code {code})")
                continue
            last = self.dispatcher.last_frame_at
            if last is not None and time.monotonic() - last > stall_s:
                return Outcome("decoder", errors.STALLED, f"no frame from the source for {stall_s:g} s")

    def _relay(self, gen: Generation, final: bool = False) -> Outcome | None:
        """Handle what the processes sent. ``final``: a process exited — give its reader a moment to deliver
        its last messages (an error event, the final checkpoint) before deciding what happened."""
        deadline = time.monotonic() + (FINAL_DRAIN_S if final else 0.05)
        while True:
            try:
                message = gen.inbox.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return None
            outcome = self.dispatcher.handle(message)
            if outcome is not None:
                return outcome
            if isinstance(message, SourceOpened) and self.gen is not None:
                self._start_learner(self.gen)
