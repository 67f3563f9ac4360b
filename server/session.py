"""One stream's supervision: its decoder and worker processes, its state, its metrics and its viewers.

A supervisor thread per stream runs *generations* (``generation.py``): a fresh shared-memory ring, fresh queues
and one decoder + one worker process. When either process fails (or a live source drops), the whole
generation is stopped — the worker saves a checkpoint on the way out — and a new one starts with back-off.
Fresh queues each time matter: a process killed while holding a ``multiprocessing.Queue`` lock would wedge
whoever uses that queue next. A file source resumes from its last position; the worker from its checkpoint.

Messages the processes send to this thread (dicts with a ``type``):
decoder -> ``opened`` (source info, the picture's size, the rate: the worker starts then), ``stats`` (decoded /
           dropped counts, position), ``ended``, ``error``;
worker  -> ``phase``, ``ready``, ``frame``, ``budget`` (learning size and the budget in words), ``dropped``,
           ``checkpoint``, ``nonfinite``, ``error``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import queue
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import errors
from .broadcast import Broadcaster
from .checkpoints import checkpoint_path
from .decoder import DecoderConfig
from .demo import ensure_demo
from .frame_record import FrameRecord
from .generation import RING_SLOTS, WORKER_STOP_S, Generation
from .learner import LearnerConfig
from .metrics import Metrics
from .pictures import kinds_mask
from .ring import FrameRing
from .sizing import Size, learning_ladder, learning_size
from .sources import SourceSpec
from .worker import WorkerConfig

log = logging.getLogger(__name__)
FINAL_DRAIN_S = 0.3  # a reader thread polls every 0.1 s
HEALTHY_RUN_S = 10.0  # a generation that ran this long resets the back-off
CRASH_SIGNALS = {signal.SIGSEGV, signal.SIGFPE, signal.SIGABRT, signal.SIGBUS}


class CheckpointFailed(Exception):
    """The worker could not write a checkpoint (the message says why); it keeps learning."""


@dataclass
class StreamConfig:
    """A stream's resolved parameters (request fields merged with the server's defaults)."""

    name: str
    source: str
    spec: SourceSpec
    fps: float | None  # asked for; None: the source's own rate (capped)
    width: int | None  # learning size asked for (one side may follow the picture's aspect ratio)
    height: int | None
    auto: bool  # the learning size follows the frame budget (at most width x height when given)
    model: str
    init: str
    stages: int
    lr: float | None
    schedule: str
    devices: tuple[str, ...] | None
    loop: bool


@dataclass
class Outcome:
    """Why a generation ended."""

    kind: str  # "closing" | "decoder" | "worker" | "ended"
    code: str | None = None
    message: str = ""


class StreamSession:
    def __init__(self, sid: str, cfg: StreamConfig, settings: Any, metrics: Metrics,
                 loop: asyncio.AbstractEventLoop, on_state: Callable[[], None]) -> None:  # fmt: skip
        self.id = sid
        self.cfg = cfg
        self.settings = settings
        self.metrics = metrics
        self.loop = loop
        self._on_state = on_state
        self.state = "starting"
        self.error: dict | None = None
        self.counters = {k: 0 for k in ("decoded", "processed", "dropped", "resampled", "reconnects",
                                        "worker_restarts", "nonfinite_losses", "ws_clients")}  # fmt: skip
        self.loss: float | None = None
        self.lr = cfg.lr
        self.resumed_from: int | None = None
        self.checkpoint_frames: int | None = None
        self.source_info: dict = {}
        self.fps = cfg.fps  # the rate in force: the source's, once it opened, unless one was asked for
        self.display: Size | None = None
        self.learning_size: Size | None = None
        self.budget_note: str | None = None
        self.phase: str | None = "opening the source"
        self.frames = FrameRecord(sid, metrics)
        self.position = 0.0
        self.broadcaster = Broadcaster(
            on_drop=metrics.ws_dropped.labels(sid).inc,
            on_count=self._set_viewers,
        )
        self._wanted = 0  # the pictures some viewer wants (``pictures.kinds_mask``)
        self._gen: Generation | None = None
        self._closing = threading.Event()
        self._requests = itertools.count(1)
        self._acks: dict[int, tuple[threading.Event, list]] = {}
        self._last_frame_at: float | None = None
        for counter in (metrics.reconnects, metrics.worker_restarts, metrics.nonfinite, metrics.ws_dropped):
            counter.labels(sid)  # series exist (at 0) from the start, as Prometheus prefers
        metrics.frames.labels(sid, "dropped", "worker_behind")
        self._thread = threading.Thread(target=self._supervise, name=f"stream-{sid}", daemon=True)

    # -- public (API side) ---------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        """Stop both processes (the worker checkpoints) and wait for it."""
        self._closing.set()
        self._thread.join(WORKER_STOP_S + 10)
        self.metrics.forget(self.id)

    @property
    def active(self) -> bool:
        return self.state not in ("ended", "error")

    def pids(self) -> dict[str, int | None]:
        gen = self._gen
        return {"decoder": gen.decoder.pid if gen else None, "worker": gen.worker_pid if gen else None}

    @property
    def checkpoint_file(self) -> Path:
        return checkpoint_path(self.settings.checkpoint_dir, self.cfg.name)

    def checkpoint(self, timeout_s: float = 15.0) -> int | None:
        """Ask the worker for a checkpoint now; the frame count saved, or None if it is not running.
        ``CheckpointFailed`` when the worker could not write it (the stream goes on learning)."""
        gen = self._gen
        if gen is None or not gen.ring.ready or gen.worker is None or not gen.worker.is_alive():
            return None
        rid = next(self._requests)
        done, result = threading.Event(), []
        self._acks[rid] = (done, result)
        gen.control.put({"type": "checkpoint", "id": rid})
        ok = done.wait(timeout_s)
        self._acks.pop(rid, None)
        if ok and result and isinstance(result[0], CheckpointFailed):
            raise result[0]
        return result[0] if ok and result else None

    def inject_fault(self, fault: str) -> bool:
        """A reliability-test hook (``settings.fault_injection``): ask the worker to suffer ``fault``."""
        gen = self._gen
        if gen is None or not gen.ring.ready or gen.worker is None or not gen.worker.is_alive():
            return False
        gen.control.put({"type": "fault", "fault": fault})
        return True

    def push_jpeg(self, data: bytes) -> bool:
        """A webcam frame from the ingest WebSocket; False (and counted) when the decoder is behind."""
        gen = self._gen
        if gen is None:
            return False
        try:
            gen.ingest.put_nowait(data)
            return True
        except queue.Full:
            self.metrics.frames.labels(self.id, "dropped", "ingest_behind").inc()
            return False

    # -- supervision (its own thread) ------------------------------------------------------------
    def _supervise(self) -> None:
        attempt = 0
        while not self._closing.is_set():
            try:
                if self.cfg.spec.kind == "demo":
                    ensure_demo(Path(self.cfg.spec.target))
                self._gen = gen = self._start_generation()
            except Exception as exc:
                log.exception("stream %s could not start", self.id)
                self._set_state("error", errors.WORKER_FAILED, f"could not start the stream: {errors.in_words(exc)}")
                return
            outcome = self._watch(gen)
            healthy = time.monotonic() - gen.started > HEALTHY_RUN_S and self.counters["processed"] > 0
            gen.shutdown()
            self._relay(gen, final=True)  # what they sent on the way out (the final checkpoint) counts
            # The last references: once the generation is collected, multiprocessing unlinks its queues' semaphores
            # (/dev/shm/sem.*). Held on to, they would outlive a server stopped by SIGTERM, which skips that clean-up.
            self._gen = gen = None
            if outcome.kind == "closing":
                self._set_state("ended", None, "")
                return
            if not self._should_retry(outcome):
                return
            attempt = 0 if healthy else attempt + 1
            delay = min(self.settings.reconnect_max_s, 0.5 * 2 ** max(0, attempt - 1))
            if self._closing.wait(delay):
                self._set_state("ended", None, "")
                return

    def _should_retry(self, outcome: Outcome) -> bool:
        """Decide what an ended generation means for the stream; True to start another one."""
        live = self.cfg.spec.live
        if outcome.kind == "worker":
            final = outcome.code in (errors.CHECKPOINT_MISMATCH, errors.WORKER_FAILED)
            if final:
                self._set_state("error", outcome.code, outcome.message)
                return False
            self.counters["worker_restarts"] += 1
            self.metrics.worker_restarts.labels(self.id).inc()
            if outcome.code == errors.WORKER_CRASHED and self.lr:
                self.lr /= 2  # numeric blow-ups can crash native kernels too: restart gentler, like a NaN loss
            self._set_state("reconnecting", outcome.code, outcome.message)
            return True
        if outcome.kind == "ended" and not live:
            self._set_state("ended", None, "")
            return False
        retry = live and (outcome.kind == "ended" or outcome.code in errors.TRANSIENT)
        retry = retry or outcome.code == errors.DECODER_DIED
        if not retry:
            self._set_state("error", outcome.code, outcome.message)
            return False
        self.counters["reconnects"] += 1
        self.metrics.reconnects.labels(self.id).inc()
        code = outcome.code or errors.ENDED
        self._set_state("reconnecting", code, outcome.message or "the live source ended")
        return True

    def _start_generation(self) -> Generation:
        cfg, s = self.cfg, self.settings
        dcfg = DecoderConfig(cfg.spec, cfg.fps, s.max_fps, s.display_side, cfg.loop, s.open_timeout_s,
                             s.read_timeout_s, start_at_s=self.position)  # fmt: skip
        self._last_frame_at = None  # the stall watchdog starts when the worker is ready (frames flow from then on)
        self._set_phase("opening the source")
        ring = FrameRing.create(RING_SLOTS, s.display_side, s.display_side)  # any picture of that long side fits
        try:
            return Generation.start(dcfg, ring, self.id)
        except BaseException:
            ring.close()  # no generation owns it yet
            raise

    def _worker_config(self, display: Size, fps: float) -> WorkerConfig:
        """The learner's settings once the picture's size and the rate are known (the decoder's ``opened``)."""
        cfg, s = self.cfg, self.settings
        largest = learning_size(display, cfg.width, cfg.height, s.learning_side)
        ladder = tuple(learning_ladder(largest, max(largest))) if cfg.auto else (largest,)
        learner = LearnerConfig(cfg.name, cfg.model, cfg.init, cfg.stages, self.lr, cfg.schedule, cfg.devices,
                                self.checkpoint_file)  # fmt: skip
        return WorkerConfig(learner, display, fps, ladder, cfg.auto, s.checkpoint_interval_s, s.jpeg_quality,
                            s.cache_dir)  # fmt: skip

    def _watch(self, gen: Generation) -> Outcome:
        """Relay messages until the generation must end; return why."""
        stall_s = self.settings.read_timeout_s + 5.0
        while True:
            if self._closing.is_set():
                return Outcome("closing")
            if gen.ring.wanted != self._wanted:  # only this thread touches the ring, which it may close
                gen.ring.wanted = self._wanted  # the worker renders the pictures someone watches, no more
            outcome = self._relay(gen)
            if outcome is not None:
                return outcome
            if gen.worker is not None and gen.worker.pid is not None and not gen.worker.is_alive():
                code = gen.worker.exitcode
                crashed = code is not None and -code in CRASH_SIGNALS
                return self._relay(gen, final=True) or Outcome(
                    "worker",
                    errors.WORKER_CRASHED if crashed else errors.WORKER_DIED,
                    f"the worker process died (exit code {code})",
                )
            if not gen.decoder.is_alive():
                return self._relay(gen, final=True) or Outcome(
                    "decoder", errors.DECODER_DIED, f"the decoder process died (exit code {gen.decoder.exitcode})"
                )
            quiet = self._last_frame_at is not None and time.monotonic() - self._last_frame_at > stall_s
            if quiet:
                return Outcome("decoder", errors.STALLED, f"no frame from the source for {stall_s:g} s")

    def _relay(self, gen: Generation, final: bool = False) -> Outcome | None:
        """Handle what the processes sent. ``final``: a process exited — give its reader a moment to deliver
        its last messages (an error event, the final checkpoint) before deciding what happened."""
        deadline = time.monotonic() + (FINAL_DRAIN_S if final else 0.05)
        while True:
            try:
                tag, message = gen.inbox.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return None
            outcome = (self._on_worker if tag == "worker" else self._on_decoder)(message)
            if outcome is not None:
                return outcome

    def _on_decoder(self, m: dict) -> Outcome | None:
        kind = m["type"]
        if kind == "stats":
            if m["decoded"]:
                self._last_frame_at = time.monotonic()
                self.counters["decoded"] += m["decoded"]
                self.metrics.frames.labels(self.id, "decoded", "").inc(m["decoded"])
            for reason, n in m["dropped"].items():
                self.counters["resampled" if reason == "resample" else "dropped"] += n
                self.metrics.frames.labels(self.id, "dropped", reason).inc(n)
            self.position = m["position"]
        elif kind == "opened":
            self.source_info = m["info"]
            self.fps, self.display = m["fps"], tuple(m["display"])
            self.metrics.frame_interval.labels(self.id).set(1.0 / self.fps)
            info = m["info"]
            rate = f" at {info['fps']:.4g} fps" if info.get("fps") else ""
            self._set_phase(f"source open ({info['width']}×{info['height']}{rate}); starting the learner")
            if self._gen is not None and self._gen.worker is None:
                self._gen.start_worker(self._worker_config(self.display, self.fps))
        elif kind == "ended":
            return Outcome("ended", errors.ENDED, "the source ended")
        elif kind == "error":
            if m["code"] in errors.REFUSED_HOP:
                self.metrics.sources_refused.labels(m["code"]).inc()
            return Outcome("decoder", m["code"], m["message"])
        return None

    def _on_worker(self, m: dict) -> Outcome | None:
        kind = m["type"]
        if kind == "frame":
            self._on_frame(m)
        elif kind == "phase":
            self._set_phase(m["phase"])
        elif kind == "ready":
            self.resumed_from, self.lr = m["resumed_from"], m["lr"]
            self.learning_size, self.budget_note = tuple(m["learning_size"]), m["note"]
            self._last_frame_at = time.monotonic()  # the decoder held its frames until now
            self._set_phase("waiting for the first frames")
        elif kind == "budget":
            self.learning_size, self.budget_note = tuple(m["learning_size"]), m["note"]
        elif kind == "dropped":
            self.counters["dropped"] += m["count"]
            self.metrics.frames.labels(self.id, "dropped", m["reason"]).inc(m["count"])
        elif kind == "checkpoint":
            if m["frames"] >= 0:
                self.checkpoint_frames = m["frames"]
            if m["error"]:
                self.metrics.checkpoint_failures.labels(self.id).inc()
            ack = self._acks.get(m["request"]) if m["request"] is not None else None
            if ack is not None:
                ack[1].append(CheckpointFailed(m["error"]) if m["error"] else m["frames"] if m["frames"] >= 0 else None)
                ack[0].set()
        elif kind == "nonfinite":
            self.lr, self.resumed_from = m["lr"], m["restored_from"]
            self.counters["nonfinite_losses"] += 1
            self.metrics.nonfinite.labels(self.id).inc()
        elif kind == "error":
            return Outcome("worker", m["code"], m["message"])
        return None

    def _on_frame(self, m: dict) -> None:
        self.counters["processed"] += 1
        self.loss, self.learning_size = m["loss"], tuple(m["learning_size"])
        if self.state != "running":
            self._set_phase(None)
            self._set_state("running", None, "")
        self._post(self.broadcaster.frame, self.frames.add(m, self.fps, self.counters["dropped"]))

    # -- helpers ---------------------------------------------------------------------------------
    def _set_state(self, state: str, code: str | None, message: str) -> None:
        self.state = state
        if code is not None:
            self.error = {"code": code, "message": message}
        elif state == "running":
            self.error = None
        notice = {"type": "state", "state": state, "error": self.error, "phase": self.phase}
        self._post(self.broadcaster.notice, notice)
        self._on_state()

    def _set_phase(self, phase: str | None) -> None:
        if phase != self.phase:
            self.phase = phase
            self._post(self.broadcaster.notice, {"type": "state", "state": self.state, "error": self.error,
                                                 "phase": phase})  # fmt: skip

    def _set_viewers(self, n: int, kinds: set[str]) -> None:
        self.counters["ws_clients"] = n
        self.metrics.ws_clients.labels(self.id).set(n)
        self._wanted = kinds_mask(kinds)  # the supervisor thread hands it to the worker

    def _post(self, fn: Callable[[Any], None], arg: Any) -> None:
        """Hand ``arg`` to the event loop (a no-op once the server's loop has closed)."""
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(fn, arg)
