"""The registry of streams: creates sessions from requests (defaults, validation, limits) and stops them."""

from __future__ import annotations

import asyncio
import threading
import uuid

from models.flow_nets import FLOW_NETS
from pipeline_core.schedules import make_schedule

from .. import errors
from ..errors import SourceError
from ..placement.gpus import available_gpus, place
from ..settings import Settings
from ..stream.config import StreamConfig
from ..stream.source.sources import parse_source
from .metrics import Metrics
from .schemas import StreamCreate
from .session import StreamSession


class RequestError(Exception):
    """A refused request: HTTP status + error code + message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


class StreamManager:
    def __init__(self, settings: Settings, metrics: Metrics, loop: asyncio.AbstractEventLoop) -> None:
        self.settings = settings
        self.metrics = metrics
        self.loop = loop
        self.sessions: dict[str, StreamSession] = {}
        self._lock = threading.Lock()
        self.gpus = available_gpus()

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
            source=body.source,
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
            active = [x for x in self.sessions.values() if x.active]
            if len(active) >= self.settings.max_streams:
                limit = self.settings.max_streams
                raise RequestError(429, errors.TOO_MANY_STREAMS, f"at most {limit} streams run at once")
            sid = uuid.uuid4().hex[:12]
            cfg.name = cfg.name or sid
            cfg.devices = place(cfg.devices, (x.cfg.devices for x in active), self.gpus)
            if any(x.cfg.name == cfg.name for x in active):
                raise RequestError(409, errors.NAME_IN_USE, f"a running stream is already named {cfg.name!r}")
            session = StreamSession(sid, cfg, self.settings, self.metrics, self.loop, self._count_states)
            self.sessions[sid] = session
        session.start()
        self._count_states()
        return session

    def get(self, sid: str) -> StreamSession:
        session = self.sessions.get(sid)
        if session is None:
            raise RequestError(404, errors.STREAM_NOT_FOUND, f"no stream {sid!r}")
        return session

    def delete(self, sid: str) -> None:
        """Blocking: stops the stream's processes (run it off the event loop)."""
        session = self.get(sid)
        session.close()
        with self._lock:
            self.sessions.pop(sid, None)
        self._count_states()

    def close_all(self) -> None:
        threads = [threading.Thread(target=s.close) for s in list(self.sessions.values())]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.sessions.clear()
        self._count_states()

    def _count_states(self) -> None:
        self.metrics.count_states([s.status.state for s in list(self.sessions.values())])
