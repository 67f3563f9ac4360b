"""``POST /api/streams/{id}/faults``: make a stream's worker suffer a fault on purpose, so the reliability tests
can check the documented recovery. Mounted only when ``settings.fault_injection`` is on (never by default).

``{"fault": "nan_loss"}``: the next frame is replaced by NaN, its loss is NaN; the worker restores the last
checkpoint, halves the learning rate and counts it in ``overtime_nonfinite_losses_total``.
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel

from ... import errors
from ..deps import Manager, require_token
from ..manager import RequestError

router = APIRouter(prefix="/api/streams", tags=["faults"], dependencies=[Depends(require_token)])


class FaultRequest(BaseModel):
    fault: Literal["nan_loss"]


@router.post("/{stream_id}/faults", status_code=202)
async def inject_fault(stream_id: str, body: FaultRequest, manager: Manager) -> dict:
    """Make the stream's worker suffer a fault (`{"fault": "nan_loss"}`), for the reliability tests."""
    session = manager.get(stream_id)
    if not await run_in_threadpool(session.work.inject_fault, body.fault):
        raise RequestError(409, errors.WORKER_FAILED, f"stream {stream_id} has no running worker")
    return {"id": stream_id, "fault": body.fault}
