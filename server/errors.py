"""Error codes shared by the API, the decoder and the worker: one ``code`` string per failure a user can act on."""

from __future__ import annotations

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
# Run-time errors (a stream's state + error).
SOURCE_UNREACHABLE = "source_unreachable"
NOT_FOUND = "not_found"
NOT_VIDEO = "not_video"
DECODE_ERROR = "decode_error"
RESOLUTION_CHANGED = "resolution_changed"
STALLED = "stalled"
ENDED = "ended"
WORKER_FAILED = "worker_failed"
WORKER_DIED = "worker_died"
WORKER_CRASHED = "worker_crashed"
DECODER_DIED = "decoder_died"
CHECKPOINT_MISMATCH = "checkpoint_mismatch"
CHECKPOINT_FAILED = "checkpoint_failed"
NO_CHECKPOINT = "no_checkpoint"
BAD_FRAME = "bad_frame"
INGEST_FLOOD = "ingest_flood"

# Live sources retry these with back-off; every other run-time error is final.
TRANSIENT = frozenset({SOURCE_UNREACHABLE, DECODE_ERROR, RESOLUTION_CHANGED, STALLED})
# Request-time refusals the decoder also meets at run time: a hop of the source (a redirect, a playlist entry) that
# leads to a refused address or scheme. Counted like a refused request.
REFUSED_HOP = frozenset({PRIVATE_ADDRESS, SCHEME_NOT_ALLOWED})


class SourceError(Exception):
    """A source problem with a code the stream's state reports (or the API answers with)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
