"""Opening a source with PyAV: its container, the video stream read from it, what it says of itself, and an error in
words (a code from ``errors``) where it does not open. The decoder process (``decoder.py``) reads the frames.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlsplit

import av

from ... import errors
from ...errors import SourceError, in_words
from .http_io import DEMUXER_OPTIONS, HttpOpener
from .sources import SourceSpec, check_host, shown_source

log = logging.getLogger(__name__)

# First bytes of container formats we recognise: a file that starts like a video but does not open is corrupt
# or truncated (decode_error), anything else is not a video at all (not_video).
VIDEO_SIGNATURES = (b"\x1a\x45\xdf\xa3", b"RIFF", b"\x47", b"\x00\x00\x01\xba", b"OggS", b"FLV")
#: Live sources delivered a segment at a time (seconds of frames at once, then nothing): paced by their timestamps as
#: recordings are, or the ring would keep the last two frames of each segment and drop the rest.
SEGMENTED_FORMATS = ("hls", "dash")
#: What a URL of a web page gets: the page of a video site or of a camera's viewer is what a user copies first.
WEB_PAGE = (
    "the URL is a web page, not a video: a page that plays a video (a video site's, a camera's viewer) needs the "
    "address of the video itself (an .mp4, .m3u8 or .ts URL, or the camera's stream URL)"
)


def open_container(
    src: SourceSpec, timeout: tuple[float, float], opener: HttpOpener | None
) -> av.container.InputContainer:
    """The source's container (``timeout``: to open it, and to read); http(s) sources through ``opener``, which checks
    every URL FFmpeg opens."""
    try:
        if opener is not None:
            return av.open(src.target, options=DEMUXER_OPTIONS, timeout=timeout, io_open=opener.io_open)
        if src.kind == "rtsp":  # FFmpeg connects by itself: the host is checked first, DNS may have changed
            check_host(src.host or "", src.policy)
            return av.open(src.target, options={"rtsp_transport": "tcp"}, timeout=timeout)
        if src.kind == "camera":
            return av.open(src.target, format="v4l2", timeout=timeout)
        return av.open(src.target, timeout=timeout)
    except (av.error.HTTPUnauthorizedError, av.error.HTTPForbiddenError) as exc:  # FFmpeg's own connections: RTSP
        log_failure("cannot open the source", exc, src.target)
        status = 401 if isinstance(exc, av.error.HTTPUnauthorizedError) else 403
        parts = urlsplit(src.target)
        raise errors.access_denied(status, bool(parts.username or parts.password)) from exc
    except av.error.InvalidDataError as exc:
        log_failure("cannot open the source", exc, src.target)
        if src.kind in ("file", "demo") and _looks_like_video(src.target):
            raise SourceError(errors.DECODE_ERROR, "the video is corrupt or truncated") from exc
        if opener is not None and opener.source_type == "text/html":
            raise SourceError(errors.NOT_VIDEO, WEB_PAGE) from exc
        raise SourceError(errors.NOT_VIDEO, "the source is not a video") from exc
    except (av.error.FileNotFoundError, FileNotFoundError) as exc:
        log_failure("cannot open the source", exc, src.target)
        code = errors.SOURCE_UNREACHABLE if src.live else errors.NOT_FOUND
        raise SourceError(code, f"cannot open the source: {in_words(exc)}") from exc
    except (av.error.FFmpegError, OSError) as exc:
        log_failure("cannot open the source", exc, src.target)
        raise SourceError(errors.SOURCE_UNREACHABLE, f"cannot open the source: {in_words(exc)}") from exc


def log_failure(what: str, exc: BaseException, target: str) -> None:
    """FFmpeg's message names the URL it opened: the server's log gets it without its password (``shown_source``)."""
    log.warning("%s: %s", what, str(exc).replace(target, shown_source(target)) if target else exc)


def _looks_like_video(path: str) -> bool:
    with open(path, "rb") as f:
        head = f.read(12)
    return head[4:8] == b"ftyp" or head.startswith(VIDEO_SIGNATURES)


def video_stream(container: av.container.InputContainer, display_side: int) -> Any:
    """The video stream the decoder reads; the container's other streams are discarded, so that FFmpeg neither
    downloads nor demuxes them. An HLS or DASH source offers renditions of one video at several sizes, and FFmpeg
    would download every one: the smallest that fills the picture (its long side at least ``display_side``) is read,
    else the largest."""
    videos = list(container.streams.video)
    if not videos:
        raise SourceError(errors.NOT_VIDEO, "the source has no video stream")
    chosen = videos[0]
    if container.format.name in SEGMENTED_FORMATS and len(videos) > 1:
        by_size = sorted(videos, key=lambda v: (max(v.codec_context.width, v.codec_context.height), v.index))
        chosen = next((v for v in by_size if max(v.codec_context.width, v.codec_context.height) >= display_side),
                      by_size[-1])  # fmt: skip
    for other in container.streams:
        if other is not chosen:
            other.discard = av.stream.Discard.all
    return chosen


def describe(container: av.container.InputContainer, vs: Any) -> dict:
    """What the source says of itself: its container, codec, size, nominal rate and a recording's length."""
    rate = vs.average_rate or vs.guessed_rate
    fps = float(rate) if rate else None
    duration = container.duration / av.time_base if container.duration else None  # a recording's length
    return {"container": container.format.name, "codec": vs.codec_context.name, "width": vs.width,
            "height": vs.height, "fps": fps, "duration_s": duration}  # fmt: skip
