"""What a stream's processes report, applied where the stream's work runs (``work.py``): each ``protocol`` message
updates the stream's status, counters and metrics, its frame record and viewers, or answers a checkpoint request. A
message that ends the generation (the source ended, a process failed) comes back as an ``Outcome`` for the supervisor
to judge."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from .. import errors
from .checkpoint_acks import CheckpointAcks
from .counts import StreamCounts
from .frame_record import FrameRecord
from .protocol import (
    BudgetChanged,
    CheckpointWritten,
    DecoderFailed,
    DecoderMessage,
    DecoderStats,
    FeedRead,
    FrameLearned,
    FramesDropped,
    LearnedToTheEnd,
    LearnerFailed,
    LearnerMessage,
    LearnerReady,
    NonFiniteLoss,
    Phase,
    SourceEnded,
    SourceOpened,
    SourceResized,
    WentBackToBest,
)
from .restart_policy import Outcome
from .status import StreamStatus

END_WAIT_S = 10.0  # after the source ended, for the learner to learn the frames it had not yet (a ring's worth)
#: What the stream's notes say when a reading of the learner's feed (``FeedRead``, ``models.feeds.Feed.reads``) starts
#: or stops holding, after the source's time.
FEED_NOTES: dict[str, dict[bool, str]] = {
    "starved_codec": {
        True: "the frames show a block codec starved of bits (its grid, blocks left as they were): the pairs learned "
        "from are coded alike, the priors learn faster and the flow shown remembers the flows before",
        False: "the frames no longer show a starved codec: learning and showing as before",
    },
    "noisy_camera": {
        True: "the camera's noise outweighs the picture's detail (a night camera): the net is shown, and learns from, "
        "its pairs smoothed",
        False: "the camera's noise no longer outweighs the picture's detail: pairs shown as they come",
    },
    "flickering_light": {
        True: "the light flickers from frame to frame (the picture's gain swings, a band rolls down it): the net is "
        "shown, and learns from, its pairs brought to one light row by row",
        False: "the light no longer flickers: pairs shown as they come",
    },
    "sharpened_frames": {
        True: "the net's flow agrees with itself better on sharpened frames (a soft or blurred picture): the net is "
        "shown, and learns from, its pairs sharpened",
        False: "the net's flow no longer agrees with itself better on sharpened frames: pairs shown as they come",
    },
}


class MessageDispatcher:
    def __init__(self, status: StreamStatus, counts: StreamCounts, frames: FrameRecord, acks: CheckpointAcks,
                 show_frame: Callable[[Any], None]) -> None:  # fmt: skip
        self.status, self.counts, self.frames, self.acks = status, counts, frames, acks
        self.show_frame = show_frame  # hands a frame's message and pictures to the viewers
        self.last_frame_at: float | None = None  # the stall watchdog's clock: None until frames flow
        self.ending: Outcome | None = None  # the source ended: the generation ends once its frames are learned
        self._ending_by = 0.0

    def new_generation(self) -> None:
        self.last_frame_at = None  # the stall watchdog starts when the learner is ready
        self.ending = None

    def overdue_end(self) -> Outcome | None:
        """The source's end, once the learner took longer than ``END_WAIT_S`` to learn what it had left."""
        return self.ending if self.ending is not None and time.monotonic() > self._ending_by else None

    def handle(self, m: DecoderMessage | LearnerMessage) -> Outcome | None:
        status, counts = self.status, self.counts
        match m:
            case FrameLearned():
                self._on_frame(m)
            case DecoderStats():
                if m.decoded:
                    if self.last_frame_at is not None:  # a learner still starting holds the frames: not a stall
                        self.last_frame_at = time.monotonic()
                    counts.decoded(m.decoded)
                for reason, n in m.dropped.items():
                    counts.dropped(reason, n)
                status.position = m.position
            case SourceOpened():
                status.source_info, status.fps, status.display = m.info, m.fps, tuple(m.display)
                counts.rate(m.fps)
                rate = f" at {m.info['fps']:.4g} fps" if m.info.get("fps") else ""
                status.set_phase(f"source open ({m.info['width']}×{m.info['height']}{rate}); starting the learner")
            case SourceResized():
                picture, before = tuple(m.picture), status.display
                status.display = picture
                if m.first_time:
                    shown = (
                        f"they are scaled to the stream's picture ({picture[0]}×{picture[1]})"
                        if picture == before
                        else f"the stream's picture takes their shape ({picture[0]}×{picture[1]})"
                    )
                    status.add_note(
                        f"at {m.at_s:.1f} s the source's frames changed size from {m.before[0]}×{m.before[1]} to "
                        f"{m.after[0]}×{m.after[1]}: {shown}, and the pair across the change is not learned from"
                    )
            case SourceEnded():
                if counts.counters.decoded - counts.counters.resampled < 2:  # a still picture, a one-frame file
                    status.add_note("the source ended after a single frame: flow needs two, so nothing was learned")
                self.ending = Outcome("live_ended" if m.live else "ended", errors.ENDED, "the source ended")
                self._ending_by = time.monotonic() + END_WAIT_S
            case LearnedToTheEnd():
                return self.ending
            case DecoderFailed():
                return Outcome("decoder", m.code, m.message)
            case Phase():
                status.set_phase(m.phase)
            case LearnerReady():
                status.resumed_from, status.lr = m.resumed_from, m.lr
                status.set_budget(tuple(m.learning_size), m.note)
                self.last_frame_at = time.monotonic()  # the decoder held its frames until now
                status.set_phase("waiting for the first frames")
            case BudgetChanged():
                status.set_budget(tuple(m.learning_size), m.note)
            case FramesDropped():
                counts.dropped(m.reason, m.count)
            case CheckpointWritten():
                if m.frames >= 0:
                    status.checkpoint_frames = m.frames
                if m.error:
                    counts.checkpoint_failed()
                self.acks.answer(m)
            case WentBackToBest():
                counts.went_back_to_best()
                status.add_note(
                    f"frame {m.frame}: learning fell behind its start (its loss {m.ratio:.3g} times the frozen "
                    f"start's over the last {m.scored} frames the start scored), so it went back to its best weights"
                )
                status.versus_start.pairs.clear()
            case FeedRead():
                status.add_note(f"at {m.at_s:.1f} s {FEED_NOTES[m.reading][m.holds]}")
            case NonFiniteLoss():
                status.lr, status.resumed_from = m.lr, m.restored_from
                counts.nonfinite_loss()
                weights = f"the weights saved after frame {m.restored_from}" if m.restored_from else "its start"
                rate = f" (now {m.lr:.3g})" if m.lr is not None else ""
                status.add_note(
                    f"a loss was not a number, so learning went back to {weights} and halved its rate{rate}"
                )
            case LearnerFailed():
                return Outcome("learner", m.code, m.message)
        return None

    def _on_frame(self, m: FrameLearned) -> None:
        status = self.status
        self.counts.processed()
        if m.scene_cut:
            self.counts.scene_cut()
        status.learning_size = tuple(m.learning_size)
        if m.loss is not None:  # none where the step's pair was known nowhere: the last loss stands
            status.loss = m.loss
        if (scored := m.start_scored) is not None:
            status.versus_start.record(scored.loss, scored.loss_start)
            if (standing := status.versus_start.standing()) is not None:
                self.counts.metrics.versus_start.set(standing.ratio)
        if status.state != "running":
            status.set_state("running", None, "")
        self.show_frame(self.frames.add(m, self.counts.counters.dropped))
