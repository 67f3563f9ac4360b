"""``/api/streams``: create, list, inspect, delete and checkpoint streams; their chart history and latest flow."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, Response
from fastapi.concurrency import run_in_threadpool

from models.online import learning_for

from ... import errors
from ...stream import checkpoints
from ...stream.checkpoint_acks import CheckpointFailed
from ...stream.config import checkpoint_file, shown_settings
from ...stream.counts import Counters
from ..deps import AppSettings, Manager, require_token
from ..manager import RequestError
from ..schemas import ErrorInfo, History, HistoryPoint, Size, StreamCreate, StreamInfo, VersusStart
from ..session import StreamSession

router = APIRouter(prefix="/api/streams", tags=["streams"], dependencies=[Depends(require_token)])
CHECKPOINT_WAIT_S = 15.0  # how long a checkpoint request waits for the learner's answer


def _size(size: tuple[int, int] | None) -> Size | None:
    return Size(width=size[0], height=size[1]) if size else None


def stream_info(session: StreamSession) -> StreamInfo:
    """The stream's settings as resolved (``StreamConfig``), its status and counters now, and where it runs."""
    cfg, snap = session.cfg, session.snapshot()
    display = snap.display or (None, None)
    return StreamInfo(
        **shown_settings(cfg, StreamInfo.model_fields),
        id=session.id, state=snap.state, error=ErrorInfo(**snap.error) if snap.error else None,
        fps=snap.fps, width=display[0], height=display[1],
        learning_size=_size(snap.learning_size), budget_note=snap.budget_note, phase=snap.phase,
        lr=snap.lr, counters=Counters(**{**snap.counters, "ws_clients": session.viewers}), loss=snap.loss,
        learning=learning_for(cfg.init).name, notes=snap.notes,
        versus_start=VersusStart(**snap.versus_start) if snap.versus_start else None,
        resumed_from=snap.resumed_from, checkpoint_frames=snap.checkpoint_frames,
        source_info=snap.source_info, pids=snap.pids, node=snap.node, devices=snap.devices,
        ws=f"/ws/streams/{session.id}",
        ingest=f"/ws/streams/{session.id}/ingest" if cfg.spec.kind == "webcam" else None,
    )  # fmt: skip


@router.post("", status_code=201, response_model=StreamInfo)
async def create_stream(body: StreamCreate, manager: Manager) -> StreamInfo:
    """Start a stream learning from a source; answers the stream (201)."""
    # run_in_threadpool: host names are resolved (getaddrinfo blocks) while validating the source
    return stream_info(await run_in_threadpool(manager.create, body))


@router.get("", response_model=list[StreamInfo])
async def list_streams(manager: Manager) -> list[StreamInfo]:
    """Every stream this server holds."""
    return [stream_info(s) for s in await run_in_threadpool(manager.all)]


@router.get("/{stream_id}", response_model=StreamInfo)
async def get_stream(stream_id: str, manager: Manager) -> StreamInfo:
    """One stream: its settings, state, counters, loss and budget."""
    return stream_info(manager.get(stream_id))


@router.delete("/{stream_id}", status_code=204)
async def delete_stream(stream_id: str, manager: Manager) -> Response:
    """Stop a stream and its processes (the worker writes a final checkpoint)."""
    await run_in_threadpool(manager.delete, stream_id)
    return Response(status_code=204)


@router.post("/{stream_id}/checkpoint")
async def checkpoint_stream(stream_id: str, manager: Manager) -> dict:
    """Write a checkpoint now; answers `{"id", "name", "frames", "url"}` (409 without a running worker, 507 when
    the write fails)."""
    session = manager.get(stream_id)
    try:
        frames = await run_in_threadpool(session.work.checkpoint, CHECKPOINT_WAIT_S)
    except CheckpointFailed as exc:
        raise RequestError(507, errors.CHECKPOINT_FAILED, str(exc)) from exc
    if frames is None:
        raise RequestError(409, errors.WORKER_FAILED, f"stream {stream_id} has no running worker to checkpoint")
    url = f"/api/streams/{session.id}/checkpoint"
    return {"id": session.id, "name": session.cfg.name, "frames": frames, "url": url}


@router.get("/{stream_id}/checkpoint", response_class=Response)
async def download_checkpoint(stream_id: str, manager: Manager, settings: AppSettings) -> Response:
    """The stream's last checkpoint file (``Pipeline.state_dict`` + stream metadata, ``torch.load``-able)."""
    session = manager.get(stream_id)
    data = await run_in_threadpool(checkpoints.read_bytes, checkpoint_file(session.cfg, settings))
    if data is None:
        raise RequestError(404, errors.NO_CHECKPOINT, f"stream {stream_id} has no checkpoint yet: POST one first")
    disposition = f'attachment; filename="overtime-{session.cfg.name}.pt"'
    return Response(data, media_type="application/octet-stream", headers={"Content-Disposition": disposition})


@router.get("/{stream_id}/history", response_model=History)
async def stream_history(stream_id: str, manager: Manager) -> History:
    """The last few hundred processed frames' numbers, so a page opened (or reloaded) later draws its charts whole."""
    session = manager.get(stream_id)
    points = await run_in_threadpool(session.work.history)
    return History(id=session.id, points=[HistoryPoint(**p) for p in points])


FLOW_MEDIA = {"kitti": ("image/png", "png", "flow16"), "flo": ("application/octet-stream", "flo", "flo")}


@router.get("/{stream_id}/flow", response_class=Response)
async def latest_flow(stream_id: str, manager: Manager, format: Literal["kitti", "flo"] = "kitti") -> Response:  # noqa: A002
    """The newest flow field, at the learning size in its pixels: ``kitti`` (16-bit PNG) or ``flo`` (Middlebury).
    The frame it belongs to is in the ``X-Overtime-Frame`` header."""
    session = manager.get(stream_id)
    latest = await run_in_threadpool(session.work.latest)
    if latest is None:
        raise RequestError(404, errors.NO_FLOW, f"stream {stream_id} has no flow yet: no frame was processed")
    frame, pictures = latest
    media, suffix, kind = FLOW_MEDIA[format]
    headers = {
        "X-Overtime-Frame": str(frame),
        "Content-Disposition": f'attachment; filename="{session.cfg.name}-{frame}.{suffix}"',
    }
    return Response(pictures.get(kind), media_type=media, headers=headers)
