"""A stream's work, wherever it runs: its supervisor thread and processes, and what they report (state, counters,
the frame record, checkpoint answers, its metrics).

Why one object: the API process holds it in-process on a single machine, and a Ray actor holds it on some node of a
cluster (``server.placement``); the API sees either through the same few calls (``StreamRunner``), and what the work
produces for viewers leaves it through two callbacks, ``on_frame`` and ``on_notice``. The parts, each with one job:

* ``StreamSupervisor`` (``supervisor.py``): the thread that runs the stream's processes, restarts them
  (``restart_policy.py``) and relays their messages;
* ``MessageDispatcher`` (``dispatch.py``): applies those messages (``protocol.py``) to the stream;
* ``StreamStatus`` (``status.py``): state, phase and what the processes last reported;
* ``StreamCounts`` (``counts.py``): the counters and their Prometheus series (``metrics.py``);
* ``FrameRecord`` (``frame_record.py``): the charts' history and the newest frame's pictures;
* ``CheckpointAcks`` (``checkpoint_acks.py``): checkpoints on request and their answers.
"""

from __future__ import annotations

import queue
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from prometheus_client.metrics_core import Metric

from ..settings import Settings
from .checkpoint_acks import CheckpointAcks
from .config import StreamConfig
from .counts import StreamCounts
from .dispatch import MessageDispatcher
from .frame_record import FrameRecord
from .metrics import StreamMetrics
from .pictures import FramePictures
from .protocol import InjectFault
from .status import StreamStatus, budget_notice, note_notice
from .supervisor import StreamSupervisor

#: Where a stream's work hands a processed frame (its viewers' message and pictures), and a change of state or phase.
OnFrame = Callable[[tuple[dict, FramePictures]], None]
OnNotice = Callable[[dict], None]


@dataclass
class StreamSnapshot:
    """What the API shows of a stream now (picklable: it crosses from a Ray actor)."""

    state: str
    error: dict[str, str] | None
    phase: str | None
    fps: float | None
    display: tuple[int, int] | None
    learning_size: tuple[int, int] | None
    budget_note: str | None
    lr: float | None
    loss: float | None
    resumed_from: int | None
    checkpoint_frames: int | None
    source_info: dict[str, Any]
    counters: dict[str, int]
    pids: dict[str, int | None]
    node: str
    devices: tuple[str, ...] | None
    notice: dict[str, Any] = field(default_factory=dict)  # the viewers' ``state`` message
    versus_start: dict[str, float] | None = None  # ``versus_start.Standing`` as a dict: what learning bought
    notes: list[str] = field(default_factory=list)  # what the stream did on its own (went back to its best weights)

    @property
    def active(self) -> bool:
        return self.state not in ("ended", "error")

    def notices(self) -> list[dict[str, Any]]:
        """What a viewer hears on connecting: the state, the budget in words (once there is one), and what the stream
        did on its own so far; later changes follow as they come."""
        told = [self.notice, *(note_notice(note) for note in self.notes)]
        if self.learning_size is not None and self.budget_note:
            told.insert(1, budget_notice(self.learning_size, self.budget_note))
        return told


class StreamRunner(Protocol):
    """What the API process asks of a stream's work, in-process (``StreamWork``) or in a Ray actor
    (``server.placement.ray_actors.RayStream``). A placement hands it over started."""

    def stop(self) -> None:
        """Stop the work for good (the learner checkpoints) and wait for it."""
        ...

    def close(self) -> None:
        """This API process lets go of the stream: work in it stops (as ``stop``), work in an actor goes on."""
        ...

    def snapshot(self) -> StreamSnapshot: ...

    def history(self) -> list[dict]:
        """The charts' points, oldest first."""
        ...

    def latest(self) -> tuple[int, FramePictures] | None:
        """The newest frame's index and pictures."""
        ...

    def checkpoint(self, timeout_s: float) -> int | None:
        """Ask the learner for a checkpoint now: the frame count saved, or None when it is not running;
        ``CheckpointFailed`` when it could not write it."""
        ...

    def inject_fault(self, fault: str) -> bool: ...

    def push_jpeg(self, data: bytes) -> bool:
        """A webcam frame; False (and counted) when the decoder is behind."""
        ...

    def set_wanted(self, mask: int) -> None:
        """The pictures some viewer wants (``pictures.kinds_mask``)."""
        ...

    def metric_families(self) -> list[Metric]: ...


class StreamWork:
    """A stream's work in this process (``StreamRunner``). ``node`` names where it runs; ``on_frame`` gets each
    processed frame's viewer message and pictures, ``on_notice`` each change of state or phase."""

    def __init__(self, sid: str, cfg: StreamConfig, settings: Settings, node: str,
                 on_frame: OnFrame, on_notice: OnNotice) -> None:  # fmt: skip
        self.id, self.cfg, self.settings, self.node = sid, cfg, settings, node
        self.metrics = StreamMetrics(sid)
        self.status = StreamStatus(cfg.lr, cfg.fps, on_notice)
        self.counts = StreamCounts(self.metrics)
        self.frames = FrameRecord(self.metrics)
        self.acks = CheckpointAcks()
        dispatcher = MessageDispatcher(self.status, self.counts, self.frames, self.acks, on_frame)
        self.supervisor = StreamSupervisor(sid, cfg, settings, self.status, self.counts, dispatcher)

    def start(self) -> None:
        self.supervisor.start()

    def stop(self) -> None:
        self.supervisor.stop()

    close = stop  # the work lives in this process: it cannot outlive it

    def snapshot(self) -> StreamSnapshot:
        s, gen = self.status, self.supervisor.gen
        return StreamSnapshot(
            state=s.state, error=s.error, phase=s.phase, fps=s.fps, display=s.display,
            learning_size=s.learning_size, budget_note=s.budget_note, lr=s.lr, loss=s.loss,
            resumed_from=s.resumed_from, checkpoint_frames=s.checkpoint_frames, source_info=dict(s.source_info),
            counters=self.counts.counters.model_dump(),
            pids={"decoder": gen.decoder.pid if gen else None, "worker": gen.learner_pid if gen else None},
            node=self.node, devices=self.cfg.devices, notice=s.notice(),
            versus_start=asdict(standing) if (standing := s.versus_start.standing()) else None, notes=list(s.notes),
        )  # fmt: skip

    def history(self) -> list[dict]:
        return list(self.frames.history)

    def latest(self) -> tuple[int, FramePictures] | None:
        return self.frames.latest

    def checkpoint(self, timeout_s: float) -> int | None:
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
        gen = self.supervisor.gen
        if gen is None:
            return False
        try:
            gen.ingest.put_nowait(data)
            return True
        except queue.Full:
            self.metrics.frames("dropped", "ingest_behind").inc()
            return False

    def set_wanted(self, mask: int) -> None:
        self.supervisor.wanted = mask  # the supervisor thread hands it to the learner process

    def metric_families(self) -> list[Metric]:
        return self.metrics.families()
