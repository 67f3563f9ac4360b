"""One stream as the API sees it: its settings, status, counters, frame record and viewers, and the requests the
API makes of it (checkpoint, fault, webcam frames). The parts, each with one job:

* ``StreamSupervisor`` (``stream_supervisor.py``): the thread that runs the stream's processes, restarts them
  (``restart_policy.py``) and relays their messages;
* ``MessageDispatcher`` (``message_dispatch.py``): applies those messages (``protocol.py``) to the stream;
* ``StreamStatus`` (``stream_status.py``): state, phase and what the processes last reported;
* ``StreamCounts`` (``stream_counts.py``): the counters and their Prometheus series;
* ``CheckpointAcks`` (``checkpoint_acks.py``): checkpoints on request and their answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..settings import Settings
from ..stream.checkpoint_acks import CheckpointAcks, CheckpointFailed
from ..stream.config import StreamConfig, checkpoint_file
from ..stream.counts import StreamCounts
from ..stream.dispatch import MessageDispatcher
from ..stream.frame_record import FrameRecord
from ..stream.pictures import kinds_mask
from ..stream.protocol import InjectFault
from ..stream.status import StreamStatus
from ..stream.supervisor import StreamSupervisor
from .broadcast import Broadcaster
from .metrics import Metrics

__all__ = ["CheckpointFailed", "StreamSession"]


class StreamSession:
    def __init__(self, sid: str, cfg: StreamConfig, settings: Settings, metrics: Metrics,
                 loop: asyncio.AbstractEventLoop, on_state: Callable[[], None]) -> None:  # fmt: skip
        self.id, self.cfg, self.settings, self.metrics, self.loop = sid, cfg, settings, metrics, loop
        self.status = StreamStatus(cfg.lr, cfg.fps, self._announce, on_state)
        self.counts = StreamCounts(sid, metrics)
        self.frames = FrameRecord(sid, metrics)
        self.broadcaster = Broadcaster(on_drop=metrics.ws_dropped.labels(sid).inc, on_count=self._set_viewers)
        self.acks = CheckpointAcks()
        dispatcher = MessageDispatcher(self.status, self.counts, self.frames, self.acks, self._show_frame)
        self.supervisor = StreamSupervisor(sid, cfg, settings, self.status, self.counts, dispatcher)

    def start(self) -> None:
        self.supervisor.start()

    def close(self) -> None:
        """Stop both processes (the learner checkpoints) and wait for it."""
        self.supervisor.stop()
        self.metrics.forget(self.id)

    @property
    def active(self) -> bool:
        return self.status.active

    def pids(self) -> dict[str, int | None]:
        gen = self.supervisor.gen
        return {"decoder": gen.decoder.pid if gen else None, "worker": gen.learner_pid if gen else None}

    @property
    def checkpoint_file(self) -> Path:
        return checkpoint_file(self.cfg, self.settings)

    def checkpoint(self, timeout_s: float = 15.0) -> int | None:
        """Ask the learner for a checkpoint now; the frame count saved, or None if it is not running.
        ``CheckpointFailed`` when the learner could not write it (the stream goes on learning)."""
        gen = self.supervisor.gen
        if gen is None or not gen.learner_alive:
            return None
        return self.acks.request(gen.control.put, timeout_s)

    def inject_fault(self, fault: str) -> bool:
        """A reliability-test hook (``settings.fault_injection``): ask the learner to suffer ``fault``."""
        gen = self.supervisor.gen
        if gen is None or not gen.learner_alive:
            return False
        gen.control.put(InjectFault(fault))
        return True

    def push_jpeg(self, data: bytes) -> bool:
        """A webcam frame from the ingest WebSocket; False (and counted) when the decoder is behind."""
        gen = self.supervisor.gen
        if gen is None:
            return False
        try:
            gen.ingest.put_nowait(data)
            return True
        except queue.Full:
            self.metrics.frames.labels(self.id, "dropped", "ingest_behind").inc()
            return False

    def _set_viewers(self, n: int, kinds: set[str]) -> None:
        self.counts.viewers(n)
        self.supervisor.wanted = kinds_mask(kinds)  # the supervisor thread hands it to the learner process

    def _announce(self, notice: dict) -> None:
        self._post(self.broadcaster.notice, notice)

    def _show_frame(self, frame: Any) -> None:
        self._post(self.broadcaster.frame, frame)

    def _post(self, fn: Callable[[Any], None], arg: Any) -> None:
        """Hand ``arg`` to the event loop (a no-op once the server's loop has closed)."""
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(fn, arg)
