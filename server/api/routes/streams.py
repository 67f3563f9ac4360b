"""``/api/streams``: create, list, inspect, delete and checkpoint streams; their chart history and latest flow."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse

from ... import errors
from ...stream.checkpoint_acks import CheckpointFailed
from ...stream.config import shown_settings
from ..deps import Manager, require_token
from ..manager import RequestError
from ..schemas import ErrorInfo, History, HistoryPoint, Size, StreamCreate, StreamInfo
from ..session import StreamSession

router = APIRouter(prefix="/api/streams", tags=["streams"], dependencies=[Depends(require_token)])


def _size(size: tuple[int, int] | None) -> Size | None:
    return Size(width=size[0], height=size[1]) if size else None


def stream_info(session: StreamSession) -> StreamInfo:
    """The stream's settings as resolved (``StreamConfig``), its status and counters now."""
    cfg, status = session.cfg, session.status
    display = status.display or (None, None)
    return StreamInfo(
        **shown_settings(cfg, StreamInfo.model_fields),
        id=session.id, state=status.state, error=ErrorInfo(**status.error) if status.error else None,
        fps=status.fps, width=display[0], height=display[1],
        learning_size=_size(status.learning_size), budget_note=status.budget_note, phase=status.phase,
        lr=status.lr, counters=session.counts.counters.model_copy(), loss=status.loss,
        resumed_from=status.resumed_from, checkpoint_frames=status.checkpoint_frames,
        source_info=status.source_info, pids=session.pids(), ws=f"/ws/streams/{session.id}",
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
    return [stream_info(s) for s in list(manager.sessions.values())]


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
        frames = await run_in_threadpool(session.checkpoint)
    except CheckpointFailed as exc:
        raise RequestError(507, errors.CHECKPOINT_FAILED, str(exc)) from exc
    if frames is None:
        raise RequestError(409, errors.WORKER_FAILED, f"stream {stream_id} has no running worker to checkpoint")
    url = f"/api/streams/{session.id}/checkpoint"
    return {"id": session.id, "name": session.cfg.name, "frames": frames, "url": url}


@router.get("/{stream_id}/checkpoint", response_class=FileResponse)
async def download_checkpoint(stream_id: str, manager: Manager) -> FileResponse:
    """The stream's last checkpoint file (``Pipeline.state_dict`` + stream metadata, ``torch.load``-able)."""
    session = manager.get(stream_id)
    path = session.checkpoint_file
    if not path.is_file():
        raise RequestError(404, errors.NO_CHECKPOINT, f"stream {stream_id} has no checkpoint yet: POST one first")
    return FileResponse(path, media_type="application/octet-stream", filename=f"overtime-{session.cfg.name}.pt")


@router.get("/{stream_id}/history", response_model=History)
async def stream_history(stream_id: str, manager: Manager) -> History:
    """The last few hundred processed frames' numbers, so a page opened (or reloaded) later draws its charts whole."""
    session = manager.get(stream_id)
    return History(id=session.id, points=[HistoryPoint(**p) for p in list(session.frames.history)])


FLOW_MEDIA = {"kitti": ("image/png", "png", "flow16"), "flo": ("application/octet-stream", "flo", "flo")}


@router.get("/{stream_id}/flow", response_class=Response)
async def latest_flow(stream_id: str, manager: Manager, format: Literal["kitti", "flo"] = "kitti") -> Response:  # noqa: A002
    """The newest flow field, at the learning size in its pixels: ``kitti`` (16-bit PNG) or ``flo`` (Middlebury).
    The frame it belongs to is in the ``X-Overtime-Frame`` header."""
    session = manager.get(stream_id)
    latest = session.frames.latest
    if latest is None:
        raise RequestError(404, errors.NO_FLOW, f"stream {stream_id} has no flow yet: no frame was processed")
    frame, pictures = latest
    media, suffix, kind = FLOW_MEDIA[format]
    headers = {
        "X-Overtime-Frame": str(frame),
        "Content-Disposition": f'attachment; filename="{session.cfg.name}-{frame}.{suffix}"',
    }
    return Response(pictures.get(kind), media_type=media, headers=headers)
