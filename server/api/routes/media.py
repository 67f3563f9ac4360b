"""``/api/media``: the videos ``file:`` sources can name, a video sent into the media folder, and one deleted."""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

from fastapi import APIRouter, Depends, Request, Response
from fastapi.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect

from ... import errors
from ...errors import SourceError
from ...settings import Settings
from ...stream.source.media_files import MediaUpload, listing, media_name, stored_video, too_large
from ..deps import AppSettings, Manager, require_token
from ..manager import RequestError, StreamManager
from ..schemas import MediaFile, MediaFolder

router = APIRouter(prefix="/api/media", tags=["media"], dependencies=[Depends(require_token)])
#: Room an upload must leave on the media folder's disk: by default (``media``, ``checkpoints`` side by side) the
#: checkpoints share it, and must not fail for a video.
MIN_FREE_BYTES = 512 * 2**20
#: The HTTP status of each refusal a video sent or deleted can meet (others: 500, in words).
STATUS = {
    errors.BAD_MEDIA_NAME: 400,
    errors.FILE_NOT_FOUND: 404,
    errors.TOO_LARGE: 413,
    errors.NOT_VIDEO: 415,
    errors.DECODE_ERROR: 415,
}


def refusal(exc: SourceError) -> RequestError:
    """What the media folder refused, as the HTTP answer its code has in ``STATUS``."""
    return RequestError(STATUS.get(exc.code, 500), exc.code, exc.message)


def listed(name: str, size: int) -> MediaFile:
    return MediaFile(name=name, size_bytes=size, source=f"file:{name}")


def upload_limit(settings: Settings) -> int:
    return int(settings.max_upload_mb * 2**20)


@router.get("", response_model=MediaFolder)
async def list_media(settings: AppSettings) -> MediaFolder:
    """The videos in the server's media folder, each with the ``file:`` source that plays it, and the largest video
    it takes: a client checks a file against it before sending it all."""
    files = [listed(name, size) for name, size in await run_in_threadpool(listing, settings.media_dir)]
    return MediaFolder(files=files, max_upload_bytes=upload_limit(settings))


#: What OpenAPI says a video sent is (the route reads the body itself, as it comes, not through a model).
VIDEO_BODY = {
    "required": True,
    "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
}


@router.put("/{name}", status_code=201, response_model=MediaFile, openapi_extra={"requestBody": VIDEO_BODY})
async def put_media(name: str, request: Request, settings: AppSettings) -> MediaFile:
    """Send a video into the media folder as ``name`` (the request's body is the file: ``curl -T clip.mp4 URL``); a
    stream then plays it as ``file:NAME``. The same name again replaces the file; streams reading it read on."""
    limit = upload_limit(settings)
    try:
        media_name(name)
        declared = int(request.headers.get("content-length") or 0)
        if declared > limit:
            raise too_large(limit)
    except SourceError as exc:
        raise refusal(exc) from exc
    free = (await run_in_threadpool(shutil.disk_usage, settings.media_dir)).free
    if free - declared < MIN_FREE_BYTES:
        raise RequestError(507, errors.NO_SPACE, "the server's disk has no room for this video")
    upload = await run_in_threadpool(MediaUpload, settings.media_dir, name, limit)
    try:
        async for chunk in request.stream():
            await run_in_threadpool(upload.write, chunk)
        path = await run_in_threadpool(upload.keep)
    except SourceError as exc:
        raise refusal(exc) from exc
    except ClientDisconnect:
        raise RequestError(400, errors.BAD_REQUEST, "the upload was cut off before the whole file came") from None
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
        raise RequestError(507, errors.NO_SPACE, "the server's disk filled up while the video came") from exc
    finally:
        await run_in_threadpool(upload.discard)
    return listed(path.name, upload.size)


@router.delete("/{name}", status_code=204)
async def delete_media(name: str, settings: AppSettings, manager: Manager) -> Response:
    """Delete a video from the media folder; refused (409) while a stream plays it: the stream would fail when it
    opens the file again (its processes started afresh after a fault)."""
    try:
        path = stored_video(settings.media_dir, name)
    except SourceError as exc:
        raise refusal(exc) from exc
    if players := await run_in_threadpool(_playing, manager, path):
        names = ", ".join(players)
        raise RequestError(409, errors.MEDIA_IN_USE, f"streams play this video ({names}): delete them first")
    await run_in_threadpool(path.unlink, missing_ok=True)
    return Response(status_code=204)


def _playing(manager: StreamManager, path: Path) -> list[str]:
    """The names of the streams, not yet ended, whose ``file:`` source is ``path``."""
    paths = {path, path.resolve()}
    return [
        s.cfg.name for s in manager.all() if s.cfg.spec.kind == "file" and Path(s.cfg.spec.target) in paths and s.active
    ]
