"""Every message a stream's processes exchange, defined once: the decoder and the learner process send them to the
stream's work (``work.py``: in the API process, or in a Ray actor) on their ``events`` / ``out`` queues, and the work
sends requests to the learner process (``control``).

Frozen dataclasses: picklable, so they cross ``multiprocessing`` queues as they are, and typed, so both ends agree on
the fields (a receiver matches on the class). Sizes are ``(width, height)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .sizing import Size


# -- decoder -> the stream's work ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SourceOpened:
    """Decoder -> work: the first frame decoded; the picture's size and the rate are known, the learner may start."""

    info: dict[str, Any]  # what the source says about itself (codec, nominal fps) and its frame size
    fps: float  # the rate in force
    display: Size  # the picture's size (the ring's frames)


@dataclass(frozen=True)
class DecoderStats:
    """Decoder -> work: frames decoded and dropped since the last report, and the position in the file (a heartbeat)."""

    decoded: int
    dropped: dict[str, int] = field(default_factory=dict)  # by reason: resample, worker_behind, decode_error
    position: float = 0.0  # seconds into a file (a restarted decoder resumes there)


@dataclass(frozen=True)
class SourceResized:
    """Decoder -> work: the source's frames changed size (upright) at ``at_s`` seconds of the stream; they are shown in
    ``picture`` from then on (the picture before where their shape is the same: ``sizing.picture_for``), and the
    first of them begins a new shot. ``first_time``: the stream has not had frames of this size before (a looping
    file's second size has, at every loop)."""

    before: Size
    after: Size
    at_s: float
    picture: Size
    first_time: bool


@dataclass(frozen=True)
class SourceEnded:
    """Decoder -> work: the source came to its end. A live one may come back (the stream reconnects); a recording's
    end (a file not looping, a URL whose source states its length: a file over HTTP, a finished HLS playlist) ends the
    stream."""

    live: bool


@dataclass(frozen=True)
class DecoderFailed:
    """Decoder -> work: the source failed (its code from ``errors``); the API process decides whether to reconnect."""

    code: str
    message: str


# -- learner process -> the stream's work ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Phase:
    """Learner -> work: what a starting learner process is doing, in words (viewers see it while they wait)."""

    phase: str


@dataclass(frozen=True)
class LearnerReady:
    """Learner -> work: the pipeline is built (the decoder's frames flow from now on); what it resumed from."""

    resumed_from: int | None  # frames the loaded weights had learned
    lr: float | None
    balance: Any  # the pipeline's stage split
    learning_size: Size
    note: str  # the frame budget in words


@dataclass(frozen=True)
class LearnedToTheEnd:
    """Learner -> work: the source ended and every frame it wrote is learned and published; the stream may end."""


@dataclass(frozen=True)
class StartScored:
    """The learner's loss on what a frame's step learned from, and the stream's frozen start's on the same pair: what
    learning bought there. The start's layers run over the frames after the one it scores
    (``learner.start_score``), so it comes with a later frame's results."""

    frame: int  # the frame scored
    loss: float
    loss_start: float


@dataclass(frozen=True)
class FrameLearned:
    """Learner -> work: what left the pipeline for one frame: its flow, pictures and timings."""

    frame: int
    loss: float | None  # the learner's loss on what its step learned from, before learning from it
    loss_zero: float | None  # the same loss for zero flow there
    start_scored: StartScored | None  # a frame the frozen start finished scoring with this one (now and then)
    dp_s: float  # the whole pipeline step
    stage_dp_s: list[float | None]
    work_s: float  # the frame's whole work (the frame budget)
    ds_s: float  # ΔS, the time the frame had: 1/fps, or longer where the source sends fewer frames than it says
    capture_time: float
    learning_size: Size
    flow_scale: float
    flow: Any  # float32 [H, W, 2] at the learning size
    images: dict[str, bytes]  # the pictures some viewer wants, by kind
    scene_cut: bool  # the frame began a new shot: paired with itself, no flow (``models.scene_cuts``)


@dataclass(frozen=True)
class BudgetChanged:
    """Learner -> work: the budget controller moved the learning size, or its note changed."""

    learning_size: Size
    note: str


@dataclass(frozen=True)
class FramesDropped:
    """Learner -> work: frames lost on the learner's side (``worker_behind``: a ring slot was overwritten)."""

    reason: str
    count: int


@dataclass(frozen=True)
class CheckpointWritten:
    """Learner -> work: a checkpoint was saved (``frames``) or could not be (``frames`` -1, ``error`` says why)."""

    frames: int
    request: int | None = None  # the ``CheckpointRequest`` it answers; None: periodic or final
    error: str | None = None


@dataclass(frozen=True)
class NonFiniteLoss:
    """Learner -> work: a loss was not finite; the last checkpoint was restored and the learning rate halved."""

    lr: float | None
    count: int
    restored_from: int | None


@dataclass(frozen=True)
class WentBackToBest:
    """Learner -> work: over a window of frames the learner's loss was ``ratio`` times its frozen start's (``scored``
    frames), so it went back to its best weights (``learner.versus_start``)."""

    frame: int
    ratio: float
    scored: int


@dataclass(frozen=True)
class FeedRead:
    """Learner -> work: from ``at_s`` (the source's time) on, what the learner's feed reads of the frames under the
    name ``reading`` (``models.feeds.Feed.reads``: a starved codec, a noisy camera, a flickering light) holds
    (``holds``) or no longer does, and the stream learns and shows as for it or as before."""

    at_s: float
    reading: str
    holds: bool


@dataclass(frozen=True)
class LearnerFailed:
    """Learner -> work: the learner could not start (its code from ``errors``); the process exits."""

    code: str
    message: str


# -- the stream's work -> learner process ---------------------------------------------------------------------------
@dataclass(frozen=True)
class CheckpointRequest:
    """work -> learner: write a checkpoint now and answer with a ``CheckpointWritten`` carrying this ``id``."""

    id: int


@dataclass(frozen=True)
class InjectFault:
    """work -> learner: suffer ``fault`` on purpose (reliability tests; ``settings.fault_injection``)."""

    fault: str


DecoderMessage = SourceOpened | DecoderStats | SourceResized | SourceEnded | DecoderFailed
LearnerMessage = (
    Phase
    | LearnerReady
    | LearnedToTheEnd
    | FrameLearned
    | WentBackToBest
    | FeedRead
    | BudgetChanged
    | FramesDropped
    | CheckpointWritten
    | NonFiniteLoss
    | LearnerFailed
)
