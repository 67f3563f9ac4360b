"""Streams on a Ray cluster: each stream's work (``StreamWork``: its supervisor, decoder and learner processes) in a
Ray actor on some node, the registry of streams in another, and the API process's proxy of each (``RayStream``).

Why detached, named actors: they outlive the API process that made them, so an API process that restarts, or a
second one on another node, finds every stream in the registry and serves it without restarting it. Why
``max_restarts=-1``: when a node is lost, Ray starts its actors again on a surviving node; a stream actor started
again starts its work afresh and the learner resumes from the last checkpoint (storage every node reaches). The
registry lives on the head node (a cluster without its head is gone anyway).

What a stream produces for viewers waits in the actor's ``Outbox`` (the latest few items, numbered); each API
process pulls what is new with a long poll, so any number of API processes can watch one stream.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from collections import deque
from dataclasses import replace
from typing import Any

import ray
from prometheus_client.metrics_core import Metric
from ray.exceptions import GetTimeoutError, RayActorError, RaySystemError

from .. import errors
from ..settings import Settings
from ..stream.config import StreamConfig
from ..stream.pictures import FramePictures
from ..stream.work import OnFrame, OnNotice, StreamSnapshot, StreamWork
from .gpus import available_gpus, place
from .room import cluster_status, waiting_for_room

log = logging.getLogger(__name__)
NAMESPACE = "overtime"
REGISTRY = "overtime-registry"
OUTBOX_ITEMS = 16  # a viewer only ever wants the newest frames; a slow API process skips the rest, as viewers do
POLL_S = 1.0  # how long an API process's long poll waits in the actor for something new
CALL_S = 10.0  # the longest an API request waits for a stream's actor (a lost node must not hang the API)
UNREACHABLE = {"code": errors.NODE_LOST, "message": "the node running this stream is unreachable; it resumes on "
               "another node from its last checkpoint"}  # fmt: skip


class Outbox:
    """Numbered items for any number of readers, the newest ``OUTBOX_ITEMS`` kept; readers wait for new ones."""

    def __init__(self) -> None:
        self._items: deque[tuple[int, str, Any]] = deque(maxlen=OUTBOX_ITEMS)
        self._seq = 0
        self._cond = threading.Condition()

    def put(self, kind: str, item: Any) -> None:
        with self._cond:
            self._seq += 1
            self._items.append((self._seq, kind, item))
            self._cond.notify_all()

    def since(self, after: int, wait_s: float) -> tuple[int, list[tuple[str, Any]]]:
        with self._cond:
            self._cond.wait_for(lambda: self._seq > after, wait_s)
            return self._seq, [(kind, item) for seq, kind, item in self._items if seq > after]


class StreamActor:
    """A stream's work in a Ray actor (made with ``ray.remote`` by ``RayPlacement``)."""

    def __init__(self, sid: str, cfg: StreamConfig, settings: Settings) -> None:
        self.incarnation = uuid.uuid4().hex  # a new one each time Ray starts the actor (again)
        self.outbox = Outbox()
        node = ray.get_runtime_context().get_node_id()  # the node's address says little where nodes share a host
        cfg = replace(cfg, devices=place(cfg.devices, [], available_gpus()))  # the GPU Ray gave this actor, if any
        on_frame: OnFrame = lambda frame: self.outbox.put("frame", frame)  # noqa: E731
        self.work = StreamWork(sid, cfg, settings, node, on_frame, lambda notice: self.outbox.put("notice", notice))
        self._wanted: dict[str, int] = {}
        self.work.start()

    def updates(self, after: int, incarnation: str | None) -> tuple[str, int, list, StreamSnapshot]:
        """What is new since item ``after`` of ``incarnation`` (all there is, for another incarnation), and the
        stream's snapshot now."""
        seq, items = self.outbox.since(after if incarnation == self.incarnation else 0, POLL_S)
        return self.incarnation, seq, items, self.work.snapshot()

    def want(self, client: str, mask: int) -> None:
        """The pictures one API process's viewers want; the work renders what any of them wants."""
        self._wanted[client] = mask
        union = 0
        for m in self._wanted.values():
            union |= m
        self.work.set_wanted(union)

    def stop(self) -> None:
        self.work.stop()

    def snapshot(self) -> StreamSnapshot:
        return self.work.snapshot()

    def history(self) -> list[dict]:
        return self.work.history()

    def latest(self) -> tuple[int, FramePictures] | None:
        return self.work.latest()

    def checkpoint(self, timeout_s: float) -> int | None:
        return self.work.checkpoint(timeout_s)

    def inject_fault(self, fault: str) -> bool:
        return self.work.inject_fault(fault)

    def push_jpeg(self, data: bytes) -> bool:
        return self.work.push_jpeg(data)

    def metric_families(self) -> list[Metric]:
        return self.work.metric_families()


class Registry:
    """The streams of the cluster: id -> configuration (a detached actor on the head node)."""

    def __init__(self) -> None:
        self.streams: dict[str, StreamConfig] = {}

    def add(self, sid: str, cfg: StreamConfig) -> None:
        self.streams[sid] = cfg

    def remove(self, sid: str) -> None:
        self.streams.pop(sid, None)

    def all(self) -> dict[str, StreamConfig]:
        return dict(self.streams)


def actor_name(sid: str) -> str:
    return f"stream-{sid}"


def unreachable_error(needs: dict[str, float]) -> dict[str, str]:
    """Why a stream's actor does not answer: its node was lost and Ray starts it again elsewhere, or no node has room
    for it (``room.py``: what it needs, what the cluster has free)."""
    status = cluster_status()
    return (waiting_for_room(needs, status) if status is not None else None) or dict(UNREACHABLE)


def first_snapshot(actor: Any, needs: dict[str, float]) -> StreamSnapshot:
    """The actor's snapshot; while it cannot answer (its node lost, Ray starting it elsewhere or waiting for room),
    one that says so."""
    try:
        return ray.get(actor.snapshot.remote(), timeout=CALL_S)
    except (RayActorError, RaySystemError, GetTimeoutError):
        error = unreachable_error(needs)
        notice = {"type": "state", "state": "reconnecting", "error": error, "phase": None}
        return StreamSnapshot(state="reconnecting", error=dict(error), phase=None, fps=None, display=None,
                              learning_size=None, budget_note=None, lr=None, loss=None, resumed_from=None,
                              checkpoint_frames=None, source_info={}, counters={}, pids={}, node="", devices=None,
                              notice=notice)  # fmt: skip


class RayStream:
    """The API process's view of a stream whose work runs in a Ray actor (``StreamRunner``). A thread pulls what
    the actor has for viewers and its snapshot; while the actor cannot be reached (its node was lost and Ray starts
    it again elsewhere) the stream shows as ``reconnecting``, and the API keeps answering from the last snapshot;
    where no node has room for what the actor asks (``needs``), the stream's error says it waits for room."""

    def __init__(self, actor: Any, client: str, on_frame: OnFrame, on_notice: OnNotice,
                 snapshot: StreamSnapshot, needs: dict[str, float]) -> None:  # fmt: skip
        self.actor, self.client, self.needs = actor, client, needs
        self.on_frame, self.on_notice = on_frame, on_notice
        self._snapshot = snapshot
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._pump, name="ray-stream", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _pump(self) -> None:
        incarnation, after = None, 0
        while not self._closing.is_set():
            try:
                call = self.actor.updates.remote(after, incarnation)
                incarnation, after, items, snapshot = ray.get(call, timeout=POLL_S + CALL_S)
            except (RayActorError, RaySystemError, GetTimeoutError) as exc:
                self._unreachable(exc)
                self._closing.wait(0.5)
                continue
            was = self._snapshot.notice
            self._snapshot = snapshot
            told = any(kind == "notice" and item.get("type") == "state" for kind, item in items)
            if snapshot.notice != was and not told:
                self.on_notice(snapshot.notice)  # e.g. back from unreachable
            for kind, item in items:
                (self.on_frame if kind == "frame" else self.on_notice)(item)

    def _unreachable(self, exc: BaseException) -> None:
        """Show the stream as reconnecting, with why (asked again at every failed call: room may come or go)."""
        error = unreachable_error(self.needs)
        if self._snapshot.state == "reconnecting" and self._snapshot.error == error:
            return
        log.warning("stream actor unreachable (%s): showing it as reconnecting (%s)", type(exc).__name__,
                    error["code"])  # fmt: skip
        snap = self._snapshot
        snap.state, snap.error = "reconnecting", error
        snap.notice = {"type": "state", "state": snap.state, "error": snap.error, "phase": snap.phase}
        self.on_notice(snap.notice)

    def _call(self, method: str, *args: Any, timeout_s: float = CALL_S) -> Any:
        return ray.get(getattr(self.actor, method).remote(*args), timeout=timeout_s)

    def stop(self) -> None:
        """Stop the work, then end the actor as a process should end (Ray's ``__ray_terminate__``: its exit
        handlers run and remove what it keeps in /tmp, and Ray does not start it again); ``ray.kill``, which skips
        them, only for an actor that does not end so."""
        self._closing.set()
        with contextlib.suppress(RayActorError, RaySystemError, GetTimeoutError):  # a lost actor stops anyway
            self._call("stop", timeout_s=60.0)
        try:
            self._call("__ray_terminate__")  # answered by the actor's death, or by nothing if it was gone already
        except (RayActorError, RaySystemError):
            pass
        except GetTimeoutError:
            ray.kill(self.actor, no_restart=True)
        self._thread.join(POLL_S + CALL_S + 1)

    def close(self) -> None:
        """Stop watching; the stream goes on in its actor (this API process leaves, or another one deleted it)."""
        self._closing.set()

    def snapshot(self) -> StreamSnapshot:
        return self._snapshot

    def history(self) -> list[dict]:
        return self._call("history")

    def latest(self) -> tuple[int, FramePictures] | None:
        return self._call("latest")

    def checkpoint(self, timeout_s: float) -> int | None:
        return self._call("checkpoint", timeout_s, timeout_s=timeout_s + CALL_S)

    def inject_fault(self, fault: str) -> bool:
        return self._call("inject_fault", fault)

    def push_jpeg(self, data: bytes) -> bool:
        self.actor.push_jpeg.remote(data)  # a webcam frame is not waited for: the next one comes soon
        return True

    def set_wanted(self, mask: int) -> None:
        self.actor.want.remote(self.client, mask)

    def metric_families(self) -> list[Metric]:
        try:
            return self._call("metric_families", timeout_s=2.0)
        except (RayActorError, RaySystemError, GetTimeoutError):
            return []
