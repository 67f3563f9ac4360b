"""The streams this API process serves: creates them from requests (defaults, validation, limits), finds those
already running where they run (a Ray cluster's, started by another API process or before a restart), and stops
them. Where a stream's work runs is the placement's business (``server.placement``)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid

from models.flow_nets import FLOW_NETS
from pipeline_core.schedules import make_schedule

from .. import errors
from ..errors import SourceError
from ..placement import Placement
from ..settings import Settings
from ..stream.config import StreamConfig
from ..stream.source.sources import parse_source, shown_source
from .metrics import ServerMetrics
from .schemas import StreamCreate
from .session import StreamSession

log = logging.getLogger(__name__)
REFRESH_S = 1.0  # how stale this process's list of a cluster's streams may be


class RequestError(Exception):
    """A refused request: HTTP status + error code + message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


class StreamManager:
    def __init__(self, settings: Settings, metrics: ServerMetrics, loop: asyncio.AbstractEventLoop,
                 placement: Placement) -> None:  # fmt: skip
        self.settings, self.metrics, self.loop, self.placement = settings, metrics, loop, placement
        self._sessions: dict[str, StreamSession] = {}
        self._lock = threading.RLock()  # a refresh may run inside a create
        self._refreshed = 0.0

    def all(self) -> list[StreamSession]:
        """Every stream served now, also those another API process started on the cluster."""
        self._refresh()
        return list(self._sessions.values())

    def resolve(self, body: StreamCreate) -> StreamConfig:
        """Merge the request with the defaults and validate it; RequestError (400) when it cannot run."""
        s = self.settings
        try:
            spec = parse_source(body.source, s.media_dir, s.schemes(), s.address_policy())
        except SourceError as exc:
            self.metrics.sources_refused.labels(exc.code).inc()
            raise RequestError(400, exc.code, exc.message) from exc
        model = body.model or s.model
        if model not in FLOW_NETS:
            raise RequestError(400, errors.BAD_REQUEST, f"unknown model {model!r}; choose one of {sorted(FLOW_NETS)}")
        schedule = body.schedule or "partime"
        stages = body.stages or s.stages
        width, height = body.width or s.width, body.height or s.height
        if max(width or 0, height or 0) > s.display_side:
            raise RequestError(
                400,
                errors.BAD_REQUEST,
                f"a learning size of {width or '?'}×{height or '?'} is larger than the largest picture this server "
                f"shows (long side {s.display_side}); ask for a smaller one, or leave the size to the service",
            )
        try:  # a stream feeds one frame pair per step: schedules that split a batch cannot run it
            make_schedule(schedule, stages).check_input((1, 6, 16, 16))
        except ValueError as exc:
            raise RequestError(400, errors.BAD_REQUEST, str(exc)) from exc
        return StreamConfig(
            name=body.name or "",
            source=shown_source(body.source),  # as shown: the decoder connects with the spec's whole URL
            spec=spec,
            fps=body.fps or s.fps,
            width=width,
            height=height,
            auto=body.auto if body.auto is not None else not (width or height),
            model=model,
            init=body.init or s.init,
            stages=stages,
            lr=body.lr or s.lr,
            schedule=schedule,
            devices=tuple(body.devices) if body.devices else None,
            loop=body.loop if body.loop is not None else spec.kind == "demo",
        )

    def create(self, body: StreamCreate) -> StreamSession:
        cfg = self.resolve(body)
        with self._lock:
            self._refresh(force=True)
            active = [x for x in self._sessions.values() if x.active]
            if len(active) >= self.settings.max_streams:
                limit = self.settings.max_streams
                raise RequestError(429, errors.TOO_MANY_STREAMS, f"at most {limit} streams run at once")
            sid = uuid.uuid4().hex[:12]
            cfg.name = cfg.name or sid
            if any(x.cfg.name == cfg.name for x in active):
                raise RequestError(409, errors.NAME_IN_USE, f"a running stream is already named {cfg.name!r}")
            session = StreamSession(sid, cfg, self.metrics, self.loop)
            self._sessions[sid] = session
            try:
                session.cfg, runner = self.placement.start(sid, cfg, session.show_frame, session.announce)
            except BaseException:
                self._sessions.pop(sid)
                raise
            session.runner = runner
        return session

    def get(self, sid: str) -> StreamSession:
        session = self._sessions.get(sid)
        if session is None:
            self._refresh(force=True)
            session = self._sessions.get(sid)
        if session is None:
            raise RequestError(404, errors.STREAM_NOT_FOUND, f"no stream {sid!r}")
        return session

    def delete(self, sid: str) -> None:
        """Blocking: stops the stream's work (the learner writes a final checkpoint; run it off the event loop)."""
        session = self.get(sid)
        session.work.stop()
        self.placement.forget(sid)
        with self._lock:
            self._sessions.pop(sid, None)
        self.metrics.forget(sid)

    def close_all(self) -> None:
        """This API process stops: work in it stops (final checkpoints); work on a cluster goes on."""
        threads = [threading.Thread(target=s.work.close) for s in list(self._sessions.values()) if s.runner]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self._sessions.clear()
        self.placement.close()

    def exposition(self) -> bytes:
        """``/metrics``: this process's series (streams by state, and those waiting for room, as of now) and every
        stream's own."""
        sessions = [s for s in self.all() if s.runner is not None]
        snapshots = [s.snapshot() for s in sessions]
        self.metrics.count_states(snap.state for snap in snapshots)
        self.metrics.count_waiting_for_room(snap.error for snap in snapshots)
        return self.metrics.exposition(s.work.metric_families() for s in sessions)

    def _refresh(self, force: bool = False) -> None:
        """Follow the placement's streams: serve those another API process started, drop those it deleted."""
        if not force and time.monotonic() - self._refreshed < REFRESH_S:
            return
        with self._lock:
            self._refreshed = time.monotonic()
            known = self.placement.running()
            for sid, cfg in known.items():
                if sid not in self._sessions:
                    session = StreamSession(sid, cfg, self.metrics, self.loop)
                    try:
                        session.runner = self.placement.attach(sid, session.show_frame, session.announce)
                    except LookupError as exc:  # deleted meanwhile by another API process
                        log.info("stream %s is gone: %s", sid, exc)
                        continue
                    self._sessions[sid] = session
            for sid in [sid for sid, s in self._sessions.items() if sid not in known and s.runner is not None]:
                self._sessions.pop(sid).work.close()
