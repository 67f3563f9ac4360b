"""Request and response bodies of the HTTP API (pydantic)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from .checkpoints import NAME_PATTERN


class StreamCreate(BaseModel):
    """``POST /api/streams``. Unset fields take the server's defaults (see ``Settings``)."""

    model_config = ConfigDict(extra="forbid")

    source: str = Field(min_length=1, max_length=2048, description="URL, file:NAME, camera:N, webcam or demo")
    name: str | None = Field(None, pattern=f"^{NAME_PATTERN}$", description="checkpoint key: same name, same weights")
    fps: float | None = Field(None, gt=0, le=120)
    width: int | None = Field(None, ge=16, le=1920, multiple_of=4)
    height: int | None = Field(None, ge=16, le=1080, multiple_of=4)
    model: str | None = None
    stages: int | None = Field(None, ge=1, le=16)
    devices: list[str] | None = Field(None, max_length=16)
    lr: float | None = Field(None, gt=0, le=1e9, description="the last stage's lr; earlier stages: lr / (1 + delay)")
    schedule: str | None = None
    loop: bool | None = Field(None, description="loop a file source (default: only the demo loops)")


class ErrorInfo(BaseModel):
    code: str
    message: str


class Counters(BaseModel):
    decoded: int = 0
    processed: int = 0
    dropped: int = 0  # lost frames: worker_behind (the pipeline could not keep up) or decode_error (corrupt)
    resampled: int = 0  # source frames skipped to hold the stream's fps
    reconnects: int = 0
    worker_restarts: int = 0
    nonfinite_losses: int = 0
    ws_clients: int = 0


class StreamInfo(BaseModel):
    id: str
    name: str
    source: str
    state: str
    error: ErrorInfo | None
    fps: float
    width: int
    height: int
    model: str
    stages: int
    lr: float | None
    schedule: str
    loop: bool
    counters: Counters
    loss: float | None
    resumed_from: int | None = Field(description="frames the weights had learned when this run loaded them")
    checkpoint_frames: int | None = Field(description="frame count in the latest checkpoint written")
    source_info: dict
    pids: dict[str, int | None]
    ws: str
    ingest: str | None
