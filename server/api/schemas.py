"""Request and response bodies of the HTTP API (pydantic)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ..stream.checkpoints import NAME_PATTERN
from ..stream.counts import Counters
from ..stream.sizing import NET_MULTIPLE


class StreamCreate(BaseModel):
    """``POST /api/streams``. Unset fields take the server's defaults (see ``Settings``)."""

    model_config = ConfigDict(extra="forbid")

    source: str = Field(min_length=1, max_length=2048, description="URL, file:NAME, camera:N, webcam or demo")
    name: str | None = Field(None, pattern=f"^{NAME_PATTERN}$", description="checkpoint key: same name, same weights")
    fps: float | None = Field(None, gt=0, le=120, description="1/ΔS; default: the source's own rate (capped)")
    width: int | None = Field(
        None, ge=16, le=1920, multiple_of=NET_MULTIPLE, description="learning width (default: automatic)"
    )
    height: int | None = Field(
        None, ge=16, le=1080, multiple_of=NET_MULTIPLE, description="learning height (default: automatic)"
    )
    auto: bool | None = Field(
        None,
        description="the service picks the largest learning size that keeps the frame budget (at most width x "
        "height when given); default: true unless width or height is given",
    )
    model: str | None = Field(None, description="flow network: fast or strong (default: the server's)")
    init: Literal["pretrained", "scratch"] | None = Field(None, description="a new net's initial weights")
    stages: int | None = Field(None, ge=1, le=16, description="pipeline stages D (default: the server's)")
    devices: list[str] | None = Field(
        None,
        max_length=16,
        description='stage devices, e.g. ["cuda:0", "cuda:1"] (default: the GPU with the fewest streams, else CPU)',
    )
    lr: float | None = Field(None, gt=0, le=1e9, description="Adam lr of every stage")
    schedule: str | None = Field(None, description="a pipeline schedule by name (default: partime)")
    loop: bool | None = Field(None, description="loop a recording, a file or a URL of one (default: the demo only)")


class MediaFile(BaseModel):
    """A video in the server's media folder (``GET /api/media``, ``PUT /api/media/{name}``)."""

    name: str = Field(description="its name in the media folder")
    size_bytes: int = Field(description="its size in bytes")
    source: str = Field(description="the source that plays it: file:NAME")


class MediaFolder(BaseModel):
    """``GET /api/media``: what a ``file:`` source can name, and how large a video ``PUT /api/media/{name}`` takes."""

    files: list[MediaFile] = Field(description="the videos in the server's media folder, by name")
    max_upload_bytes: int = Field(description="the largest video the server takes (0: none)")


class Size(BaseModel):
    width: int
    height: int


class ErrorInfo(BaseModel):
    code: str
    message: str


class VersusStart(BaseModel):
    """The learner against its frozen start on the made pairs of the last frames the start scored (every tenth, or
    further apart)."""

    ratio: float = Field(
        description="the learner's mean loss / the frozen start's, on the made pairs it learned from: under 1, it "
        "explains them better than it began (the stream's own motion gains less at night and under heavy compression)"
    )
    learned: float = Field(description="the learner's mean loss, each frame's before it learned from it")
    start: float = Field(description="the frozen start's mean loss on the same frames")
    scored: int = Field(description="frames in the window")


class StreamInfo(BaseModel):
    id: str
    name: str
    source: str = Field(description="as given, a URL's password shown as ***")
    state: str
    error: ErrorInfo | None
    fps: float | None = Field(description="1/ΔS; null until the source opened when it follows the source")
    width: int | None = Field(description="the picture viewers get (the source's, up to display_side)")
    height: int | None
    auto: bool = Field(description="the learning size follows the frame budget")
    learning_size: Size | None = Field(description="what the network learns at now")
    budget_note: str | None = Field(description="the frame budget in words: what holds, what does not")
    phase: str | None = Field(description="what a starting stream is doing")
    model: str
    init: str
    stages: int
    lr: float | None
    schedule: str
    devices: list[str] | None = Field(description="where the stages learn (null: the CPU)")
    node: str = Field(description="where the stream's work runs: this machine's host name, or a Ray node's id")
    loop: bool
    counters: Counters
    loss: float | None
    learning: str = Field(
        description="what the learner learns from: known-motion (pairs with a known flow made from the stream's own "
        "frames; from the shipped weights) or photometric (the pair's own loss; from scratch)"
    )
    versus_start: VersusStart | None = Field(description="its loss beside its frozen start's (null: none yet)")
    notes: list[str] = Field(description="what the stream did on its own that you should know (oldest first)")
    resumed_from: int | None = Field(description="frames the weights had learned when this run loaded them")
    checkpoint_frames: int | None = Field(description="frame count in the latest checkpoint written")
    source_info: dict
    pids: dict[str, int | None]
    ws: str
    ingest: str | None


class StartScored(BaseModel):
    """A pair the stream's frozen start scored: the learner's loss there (before learning from it), and the start's."""

    frame: int = Field(description="the frame scored (the start's layers run over the frames after it)")
    loss: float
    loss_start: float


class HistoryPoint(BaseModel):
    """One processed frame of a stream's charts."""

    frame: int
    loss: float | None
    loss_zero: float | None
    start_scored: StartScored | None = Field(description="a frame the frozen start finished scoring with this one")
    dp_s: float
    work_s: float
    ds_s: float
    stage_dp_s: list[float | None]
    latency_s: float = Field(description="capture -> the API process had the frame (viewers add their sending)")
    dropped: int


class History(BaseModel):
    id: str
    points: list[HistoryPoint] = Field(description="oldest first; the last few hundred frames")
