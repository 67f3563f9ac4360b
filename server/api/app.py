"""The FastAPI application: routers, error format, the stream manager's lifetime, the browser client."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles

from ..placement import make_placement
from ..settings import Settings
from ..stream.checkpoints import is_url
from .manager import RequestError, StreamManager
from .metrics import ServerMetrics
from .routes import faults, health, media, streams, ws
from .schemas import StreamCreate


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        settings.media_dir.mkdir(parents=True, exist_ok=True)
        if not is_url(settings.checkpoint_dir):
            Path(settings.checkpoint_dir).mkdir(parents=True, exist_ok=True)
        placement = await run_in_threadpool(make_placement, settings)
        manager = StreamManager(settings, ServerMetrics(), asyncio.get_running_loop(), placement)
        app.state.manager = manager
        url = f"http://{settings.host}:{settings.port}/"
        running = await run_in_threadpool(manager.all)  # a cluster's streams, started before this process
        if settings.demo_stream:
            demo = next((s for s in running if s.cfg.name == "demo" and s.active), None)
            demo = demo or await run_in_threadpool(manager.create, StreamCreate(source="demo", name="demo"))
            url += f"?stream={demo.id}"
        print(f"Overtime is serving: open {url}", flush=True)  # the line `make run` users look for
        try:
            yield
        finally:
            await run_in_threadpool(manager.close_all)  # workers write their final checkpoints

    app = FastAPI(title="Overtime", summary="video that learns optical flow while you watch", lifespan=lifespan)
    app.state.settings = settings
    app.include_router(health.router)
    app.include_router(streams.router)
    app.include_router(media.router)
    app.include_router(ws.router)
    if settings.fault_injection:
        app.include_router(faults.router)

    @app.exception_handler(RequestError)
    async def request_error(_: Request, exc: RequestError) -> JSONResponse:
        return JSONResponse({"detail": {"code": exc.code, "message": exc.message}}, status_code=exc.status)

    if settings.web_dir.is_dir():
        app.mount("/", StaticFiles(directory=settings.web_dir, html=True), name="web")
    return app
