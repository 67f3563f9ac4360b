"""Liveness, readiness and the Prometheus scrape endpoint."""

from __future__ import annotations

import os

from fastapi import APIRouter, Response
from fastapi.concurrency import run_in_threadpool
from prometheus_client import CONTENT_TYPE_LATEST

from ...stream.checkpoints import is_url
from ..deps import AppSettings, Manager

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict:
    """Liveness: `{"status": "ok"}` while the process answers."""
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(response: Response, manager: Manager, settings: AppSettings) -> dict:
    """Readiness: 200 when a new stream would be accepted (below max streams, checkpoint dir writable), else 503.
    Answers `{"ready", "streams", "problems"}`."""
    active = sum(s.active for s in await run_in_threadpool(manager.all))
    problems = []
    if active >= settings.max_streams:
        problems.append(f"{active} of {settings.max_streams} streams running")
    if not is_url(settings.checkpoint_dir) and not os.access(settings.checkpoint_dir, os.W_OK):
        problems.append("the checkpoint folder is not writable")
    response.status_code = 503 if problems else 200
    return {"ready": not problems, "streams": active, "problems": problems}


@router.get("/metrics")
async def metrics(manager: Manager) -> Response:
    """Prometheus text exposition of every metric, every stream's wherever it runs (not behind the token)."""
    return Response(await run_in_threadpool(manager.exposition), media_type=CONTENT_TYPE_LATEST)
