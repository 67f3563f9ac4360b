"""The media folder: the files ``file:`` sources name, and videos sent into it over the API (``PUT /api/media``).

Why a way in over HTTP: the server reads files from its own folder only (``sources.media_path``), and the folder of a
server in a container or on another machine is one its user cannot copy into. A video sent is written whole or not at
all: into a hidden file beside its place, moved there once it opened and decoded as a video, so that a stream never
reads half a file and a failed upload leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from pathlib import Path

import av

from ... import errors
from ...errors import SourceError
from .opening import open_container, video_stream
from .sources import DEMO_FILE, SourceSpec

#: A media file's name: letters, digits, '.', '_' and '-', not starting with '.' (hidden files are the uploads' own).
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
#: How long opening a video sent may take, and reading from it (s).
PROBE_TIMEOUT_S = (10.0, 10.0)
#: A video's permissions once in place: as a file copied into the folder would have them.
FILE_MODE = 0o644


def media_name(name: str) -> str:
    """``name`` if a video may be stored under it, else a ``bad_media_name`` error in words."""
    if not NAME.fullmatch(name):
        raise SourceError(
            errors.BAD_MEDIA_NAME,
            "a media file's name is 1-128 letters, digits, '.', '_' or '-', and does not start with '.', '_' or '-'",
        )
    if name == DEMO_FILE:
        raise SourceError(errors.BAD_MEDIA_NAME, f"{DEMO_FILE} is the service's own demo video: choose another name")
    return name


def listing(media_dir: Path) -> list[tuple[str, int]]:
    """The videos a ``file:`` source can name, (name, bytes), by name; hidden files (uploads under way) left out."""
    if not media_dir.is_dir():
        return []
    return sorted((p.name, p.stat().st_size) for p in media_dir.iterdir() if p.is_file() and NAME.fullmatch(p.name))


def stored_video(media_dir: Path, name: str) -> Path:
    """The path of the video ``name`` in ``media_dir`` (the folder resolved, as a stream's ``file:`` source has it; the
    name itself not, so that a link is deleted, not what it points to); a ``bad_media_name`` or ``file_not_found``
    error in words."""
    path = Path(media_dir).resolve() / media_name(name)
    if not path.is_file():
        raise SourceError(errors.FILE_NOT_FOUND, f"no video {name} in the media folder")
    return path


class MediaUpload:
    """A video being received into ``media_dir`` as ``name``, at most ``limit_bytes``: ``write`` each chunk, then
    ``keep`` (checked as a video, moved into place) or ``discard``. Blocking file I/O: call from a thread."""

    def __init__(self, media_dir: Path, name: str, limit_bytes: int) -> None:
        self.path = Path(media_dir) / media_name(name)
        self.limit_bytes = limit_bytes
        self.size = 0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, part = tempfile.mkstemp(prefix=".upload-", dir=self.path.parent)
        self.part = Path(part)
        os.chmod(fd, FILE_MODE)  # mkstemp's 0600 would keep the video from other users a folder's files are shared with
        self.file = os.fdopen(fd, "wb")

    def write(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.size > self.limit_bytes:
            raise too_large(self.limit_bytes)
        self.file.write(chunk)

    def keep(self) -> Path:
        """The video in its place, replacing one of the same name (a stream reading that one reads on undisturbed)."""
        self.file.close()
        if self.size == 0:
            raise SourceError(errors.NOT_VIDEO, "the file sent is empty")
        check_video(self.part)
        os.replace(self.part, self.path)
        return self.path

    def discard(self) -> None:
        self.file.close()
        self.part.unlink(missing_ok=True)


def too_large(limit_bytes: int) -> SourceError:
    return SourceError(errors.TOO_LARGE, f"the server takes videos of at most {limit_bytes / 2**20:g} MB")


def check_video(path: Path) -> None:
    """A ``not_video`` or ``decode_error`` error unless ``path`` opens as a video whose first frame decodes: what a
    stream of it would end in, said before the file is kept."""
    try:
        container = open_container(SourceSpec("file", str(path), live=False), PROBE_TIMEOUT_S, None)
    except SourceError as exc:
        if exc.code == errors.NOT_VIDEO:
            raise SourceError(errors.NOT_VIDEO, "the file sent is not a video") from exc
        raise
    with contextlib.closing(container) as box:
        stream = video_stream(box, display_side=1)
        try:
            next(box.decode(stream))
        except StopIteration:
            raise SourceError(errors.NOT_VIDEO, "the video has no frames") from None
        except (av.error.FFmpegError, ValueError) as exc:
            raise SourceError(errors.DECODE_ERROR, "the video is corrupt or truncated") from exc
