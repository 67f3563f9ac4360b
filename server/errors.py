"""Error codes shared by the API, the decoder and the worker: one ``code`` string per failure a user can act on."""

from __future__ import annotations

import errno
import socket

import av.error as av_error

# Request-time errors (HTTP 400 / 401 / 404 / 429).
SCHEME_NOT_ALLOWED = "scheme_not_allowed"
BAD_SOURCE = "bad_source"
BAD_REQUEST = "bad_request"
PATH_OUTSIDE_MEDIA = "path_outside_media"
FILE_NOT_FOUND = "file_not_found"
PRIVATE_ADDRESS = "private_address"
UNAUTHORIZED = "unauthorized"
STREAM_NOT_FOUND = "stream_not_found"
TOO_MANY_STREAMS = "too_many_streams"
NAME_IN_USE = "name_in_use"
# A video sent into the media folder or deleted from it (PUT, DELETE /api/media: HTTP 400 / 409 / 413 / 415 / 507).
BAD_MEDIA_NAME = "bad_media_name"
TOO_LARGE = "too_large"
NO_SPACE = "no_space"
MEDIA_IN_USE = "media_in_use"
# Run-time errors (a stream's state + error).
SOURCE_UNREACHABLE = "source_unreachable"
NOT_FOUND = "not_found"
NOT_VIDEO = "not_video"
ACCESS_DENIED = "access_denied"  # the source's server refuses: no, wrong or insufficient credentials
DECODE_ERROR = "decode_error"
STALLED = "stalled"
ENDED = "ended"
WORKER_FAILED = "worker_failed"
WORKER_DIED = "worker_died"
WORKER_CRASHED = "worker_crashed"
DECODER_DIED = "decoder_died"
CHECKPOINT_MISMATCH = "checkpoint_mismatch"
CHECKPOINT_UNREADABLE = "checkpoint_unreadable"  # damaged, or not a stream's checkpoint
CHECKPOINT_FAILED = "checkpoint_failed"
NODE_LOST = "node_lost"
WAITING_FOR_ROOM = "waiting_for_room"  # a lost node's stream that no node has room for (a Ray cluster)
NO_CHECKPOINT = "no_checkpoint"
NO_FLOW = "no_flow"
BAD_FRAME = "bad_frame"
INGEST_FLOOD = "ingest_flood"

# Live sources retry these with back-off; every other run-time error is final.
TRANSIENT = frozenset({SOURCE_UNREACHABLE, DECODE_ERROR, STALLED})
# Request-time refusals the decoder also meets at run time: a hop of the source (a redirect, a playlist entry) that
# leads to a refused address or scheme. Counted like a refused request.
REFUSED_HOP = frozenset({PRIVATE_ADDRESS, SCHEME_NOT_ALLOWED})


class SourceError(Exception):
    """A source problem with a code the stream's state reports (or the API answers with)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


#: What a failure means, by the kind of exception (the first match wins). These words reach users; the exception's own
#: text (a library's message, an errno string, often with a path on this server) goes to the server's log only.
WORDS: tuple[tuple[type[BaseException], str], ...] = (
    (av_error.HTTPNotFoundError, "the server answered 404 (not found)"),
    (av_error.HTTPForbiddenError, "the server answered 403 (forbidden)"),
    (av_error.HTTPUnauthorizedError, "the server asks for credentials (401)"),
    (av_error.HTTPTooManyRequestsError, "the server is limiting requests (429)"),
    (av_error.HTTPClientError, "the server refused the request (4xx)"),
    (av_error.HTTPServerError, "the server failed (5xx)"),
    (av_error.InvalidDataError, "the data is not in a format the decoder understands"),
    (av_error.ExitError, "no data within the timeout"),
    (av_error.EOFError, "the data ended early"),
    (socket.gaierror, "the host name does not resolve"),
    (ConnectionRefusedError, "the connection was refused"),
    (ConnectionError, "the connection broke"),
    (TimeoutError, "no answer within the timeout"),
    (FileNotFoundError, "not found"),
    (PermissionError, "permission denied"),
    (IsADirectoryError, "a folder, not a file"),
    (MemoryError, "out of memory"),
)
ERRNO_WORDS = {
    errno.ENOSPC: "no space left on the disk",
    errno.EDQUOT: "the disk quota is used up",
    errno.EROFS: "the file system is read-only",
    errno.EIO: "an input/output error",
    errno.EHOSTUNREACH: "the host cannot be reached",
    errno.ENETUNREACH: "the network cannot be reached",
}


def in_words(exc: BaseException) -> str:
    """Why ``exc`` happened, in a few words fit for a user: never a path, never a library's raw message."""
    for kind, words in WORDS:
        if isinstance(exc, kind):
            return words
    return ERRNO_WORDS.get(getattr(exc, "errno", None), "an unexpected error (details in the server log)")


def access_denied(status: int, credentials_given: bool) -> SourceError:
    """A source's server refusing access (HTTP or RTSP 401 or 403), in words that say what to do. Final, never retried:
    another try fails the same way, and a camera locks an account after a few wrong passwords."""
    if status == 403:
        words = "the server refuses access to the source (403 forbidden)"
    elif credentials_given:
        words = "the server refused the user name and password in the URL (401)"
    else:
        words = (
            "the server asks for a user name and password (401): give them in the URL, scheme://USER:PASSWORD@host/…"
        )
    return SourceError(ACCESS_DENIED, words)
