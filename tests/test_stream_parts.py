"""A stream's parts, without processes: the messages cross a pickle intact, the restart policy
and its back-off, the dispatch of messages into the status, counters and metrics, checkpoint acknowledgements, and
the process configurations derived from a stream's settings."""

from __future__ import annotations

import pickle
import threading
import time
from dataclasses import FrozenInstanceError, fields
from pathlib import Path
from unittest import mock

import numpy as np
import pytest

from models.online import KNOWN_MOTION
from server import errors
from server.api.schemas import StreamInfo
from server.settings import Settings
from server.stream import dispatch, protocol
from server.stream.checkpoint_acks import CheckpointAcks, CheckpointFailed
from server.stream.config import StreamConfig, decoder_config, learner_process_config, shown_settings
from server.stream.counts import Counters, StreamCounts
from server.stream.dispatch import MessageDispatcher
from server.stream.frame_record import FrameRecord
from server.stream.metrics import StreamMetrics
from server.stream.restart_policy import Backoff, Outcome, Verdict, judge
from server.stream.source.decoder import Reporter
from server.stream.source.sources import SourceSpec
from server.stream.status import StreamStatus

SID = "unit"


def frame_learned(
    frame: int = 0,
    learning_size: tuple[int, int] = (32, 24),
    cut: bool = False,
    start_scored: protocol.StartScored | None = None,
) -> protocol.FrameLearned:
    w, h = learning_size
    return protocol.FrameLearned(frame=frame, loss=0.5, loss_zero=0.7, start_scored=start_scored, dp_s=0.02,
                                 stage_dp_s=[0.01, None], work_s=0.03, ds_s=0.04, capture_time=1.0,
                                 learning_size=learning_size,
                                 flow_scale=2.0, flow=np.zeros((h, w, 2), np.float32), images={"overlay": b"jpeg"},
                                 scene_cut=cut)  # fmt: skip


EXAMPLES = [
    protocol.SourceOpened({"codec": "h264", "fps": 25.0, "width": 640, "height": 480}, 25.0, (640, 480)),
    protocol.DecoderStats(3, {"resample": 2}, 1.5),
    protocol.SourceResized((640, 480), (1280, 960), 12.5, (640, 480), True),
    protocol.SourceEnded(live=False),
    protocol.LearnedToTheEnd(),
    protocol.DecoderFailed(errors.STALLED, "no data"),
    protocol.Phase("building the learner"),
    protocol.LearnerReady(10, 1e-4, [3, 2], (64, 48), "holds"),
    frame_learned(),
    protocol.StartScored(0, 0.5, 1.0),  # a part of ``FrameLearned``
    protocol.BudgetChanged((32, 24), "smaller"),
    protocol.FramesDropped("worker_behind", 1),
    protocol.CheckpointWritten(12, 3, None),
    protocol.NonFiniteLoss(5e-5, 1, 10),
    protocol.WentBackToBest(120, 1.07, 10),
    protocol.FeedRead(4.0, "noisy_camera", True),
    protocol.LearnerFailed(errors.WORKER_FAILED, "no"),
    protocol.CheckpointRequest(7),
    protocol.InjectFault("nan_loss"),
]


def test_every_message_kind_has_an_example():
    kinds = {v for v in vars(protocol).values() if isinstance(v, type) and v.__module__ == protocol.__name__}
    assert kinds == {type(m) for m in EXAMPLES}


@pytest.mark.parametrize("message", EXAMPLES, ids=lambda m: type(m).__name__)
def test_messages_cross_a_pickle_intact_and_are_frozen(message):
    back = pickle.loads(pickle.dumps(message))
    assert type(back) is type(message)
    for f in fields(message):
        a, b = getattr(message, f.name), getattr(back, f.name)
        assert np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b
    if fields(message):
        with pytest.raises(FrozenInstanceError):
            setattr(message, fields(message)[0].name, None)


# -- restart policy -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("outcome", "live", "verdict"),
    [
        (Outcome("closing"), True, Verdict(False, "ended")),
        (Outcome("ended", errors.ENDED, "the source ended"), False, Verdict(False, "ended")),
        (Outcome("ended", errors.ENDED, "the source ended"), True, Verdict(False, "ended")),  # a URL of a recording
        (Outcome("live_ended", errors.ENDED, "the source ended"), True,
         Verdict(True, "reconnecting", errors.ENDED, "the source ended", "reconnect")),
        (Outcome("decoder", errors.STALLED, "quiet"), True, Verdict(True, "reconnecting", errors.STALLED, "quiet",
                                                                    "reconnect")),
        (Outcome("decoder", errors.STALLED, "quiet"), False, Verdict(False, "error", errors.STALLED, "quiet")),
        (Outcome("decoder", errors.NOT_VIDEO, "no"), True, Verdict(False, "error", errors.NOT_VIDEO, "no")),
        (Outcome("decoder", errors.DECODER_DIED, "died"), False,
         Verdict(True, "reconnecting", errors.DECODER_DIED, "died", "reconnect")),
        (Outcome("learner", errors.WORKER_DIED, "died"), False,
         Verdict(True, "reconnecting", errors.WORKER_DIED, "died", "learner_restart")),
        (Outcome("learner", errors.WORKER_CRASHED, "segv"), False,
         Verdict(True, "reconnecting", errors.WORKER_CRASHED, "segv", "learner_restart", halve_lr=True)),
        (Outcome("learner", errors.CHECKPOINT_MISMATCH, "other net"), True,
         Verdict(False, "error", errors.CHECKPOINT_MISMATCH, "other net")),
        (Outcome("learner", errors.WORKER_FAILED, "no memory"), True,
         Verdict(False, "error", errors.WORKER_FAILED, "no memory")),
    ],
)  # fmt: skip
def test_judge(outcome, live, verdict):
    assert judge(outcome, live) == verdict


def test_backoff_doubles_up_to_its_cap_and_a_healthy_run_starts_over():
    backoff = Backoff(max_s=3.0)
    assert [backoff.next_delay(False) for _ in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert backoff.next_delay(True) == 0.5
    assert backoff.next_delay(False) == 0.5


# -- message dispatch -----------------------------------------------------------------------------------------------
class Parts:
    def __init__(self) -> None:
        self.metrics = StreamMetrics(SID)
        self.notices: list[dict] = []
        self.shown: list = []
        self.status = StreamStatus(1e-3, None, self.notices.append)
        self.counts = StreamCounts(self.metrics)
        self.acks = CheckpointAcks()
        frames = FrameRecord(self.metrics)
        self.dispatcher = MessageDispatcher(self.status, self.counts, frames, self.acks, self.shown.append)

    def metric(self, name: str, **labels: str) -> float | None:
        return self.metrics.registry.get_sample_value(name, {"stream": SID, **labels})


@pytest.fixture
def parts() -> Parts:
    return Parts()


def test_decoder_stats_count_decoded_dropped_and_resampled_frames(parts):
    d = parts.dispatcher
    d.handle(protocol.LearnerReady(None, 5e-4, [1], (64, 48), "holds"))
    assert d.handle(protocol.DecoderStats(4, {"resample": 2, "worker_behind": 1}, 2.5)) is None
    assert d.handle(protocol.DecoderStats(1, {}, 3.0)) is None
    assert d.handle(protocol.FramesDropped("worker_behind", 2)) is None
    assert parts.counts.counters == Counters(decoded=5, dropped=3, resampled=2)
    assert parts.status.position == 3.0 and d.last_frame_at is not None
    assert parts.metric("overtime_frames_total", outcome="decoded", reason="") == 5
    assert parts.metric("overtime_frames_total", outcome="dropped", reason="worker_behind") == 3
    assert parts.metric("overtime_frames_total", outcome="dropped", reason="resample") == 2


def test_the_stall_watchdog_waits_for_the_learner(parts):
    """The decoder reports the frame that opened the source while the learner starts (seconds under load, longer
    than the stall limit): the watchdog's clock starts when the learner is ready, not then."""
    d = parts.dispatcher
    d.handle(EXAMPLES[0])
    d.handle(protocol.DecoderStats(1, {}, 0.0))
    assert d.last_frame_at is None
    d.handle(protocol.LearnerReady(None, 5e-4, [1], (64, 48), "holds"))
    ready_at = d.last_frame_at
    assert ready_at is not None
    d.handle(protocol.DecoderStats(3, {}, 0.1))
    assert d.last_frame_at >= ready_at


def test_source_opened_sets_the_rate_and_the_picture(parts):
    parts.dispatcher.handle(EXAMPLES[0])
    status = parts.status
    assert (status.fps, status.display, status.source_info["codec"]) == (25.0, (640, 480), "h264")
    assert status.phase == "source open (640×480 at 25 fps); starting the learner"
    assert parts.notices[-1] == {"type": "state", "state": "starting", "error": None, "phase": status.phase}
    assert parts.metric("overtime_frame_interval_seconds") == pytest.approx(0.04)


def test_first_frame_makes_the_stream_run_and_reaches_the_viewers(parts):
    d, status = parts.dispatcher, parts.status
    d.handle(EXAMPLES[0])
    d.handle(protocol.LearnerReady(10, 5e-4, [1], (64, 48), "holds"))
    assert (status.resumed_from, status.lr, status.learning_size, status.budget_note) == (10, 5e-4, (64, 48), "holds")
    assert status.phase == "waiting for the first frames"
    assert {"type": "budget", "learning_size": [64, 48], "note": "holds"} in parts.notices
    d.handle(frame_learned(0, (32, 24)))
    assert status.state == "running" and status.phase is None and status.error is None
    assert (status.loss, status.learning_size, parts.counts.counters.processed) == (0.5, (32, 24), 1)
    message, pictures = parts.shown[-1]
    assert message["type"] == "frame" and message["learning_size"] == [32, 24] and message["ds_s"] == 0.04
    assert parts.notices[-1] == {"type": "state", "state": "running", "error": None, "phase": None}
    states = [(n["state"], n["phase"]) for n in parts.notices if n["type"] == "state"]
    assert states[-2:] == [("starting", "waiting for the first frames"), ("running", None)]  # told once


def test_a_frame_that_began_a_new_shot_is_counted_and_said(parts):
    parts.dispatcher.handle(EXAMPLES[0])
    parts.dispatcher.handle(frame_learned(0))
    parts.dispatcher.handle(frame_learned(1, cut=True))
    assert [message["scene_cut"] for message, _ in parts.shown[-2:]] == [False, True]
    assert parts.metric("overtime_scene_cuts_total") == 1 and parts.counts.counters.scene_cuts == 1


def test_messages_that_end_a_generation_say_why(parts):
    """The source's end ends the generation once the learner has learned the frames it had left (or after
    ``END_WAIT_S``), not before: a short clip's every pair is learned."""
    d = parts.dispatcher
    for live, why in ((False, "ended"), (True, "live_ended")):
        d.new_generation()
        assert d.handle(protocol.SourceEnded(live=live)) is None and d.overdue_end() is None
        assert d.handle(protocol.LearnedToTheEnd()) == Outcome(why, errors.ENDED, "the source ended")
    d.new_generation()
    d.handle(protocol.SourceEnded(live=False))
    with mock.patch.object(dispatch.time, "monotonic", return_value=time.monotonic() + dispatch.END_WAIT_S + 1):
        assert d.overdue_end() == Outcome("ended", errors.ENDED, "the source ended")
    assert d.handle(protocol.DecoderFailed(errors.STALLED, "quiet")) == Outcome("decoder", errors.STALLED, "quiet")
    assert d.handle(protocol.LearnerFailed(errors.WORKER_FAILED, "x")) == Outcome("learner", errors.WORKER_FAILED, "x")


def test_the_budget_is_told_to_viewers_when_it_changes(parts):
    """The page and `overtime watch` say the frame budget in words: a viewer hears each new size or wording once."""
    d = parts.dispatcher
    d.handle(protocol.LearnerReady(None, 5e-4, [1], (64, 48), "measuring"))
    d.handle(protocol.BudgetChanged((64, 48), "measuring"))
    d.handle(protocol.BudgetChanged((32, 24), "measuring"))
    d.handle(protocol.BudgetChanged((32, 24), "cannot keep 30 fps"))
    told = [(n["learning_size"], n["note"]) for n in parts.notices if n["type"] == "budget"]
    assert told == [([64, 48], "measuring"), ([32, 24], "measuring"), ([32, 24], "cannot keep 30 fps")]
    assert (parts.status.learning_size, parts.status.budget_note) == ((32, 24), "cannot keep 30 fps")


def test_nonfinite_loss_and_failed_checkpoints_are_counted_and_said(parts):
    d, status = parts.dispatcher, parts.status
    d.handle(protocol.NonFiniteLoss(5e-4, 1, 7))
    assert (status.lr, status.resumed_from, parts.counts.counters.nonfinite_losses) == (5e-4, 7, 1)
    assert parts.metric("overtime_nonfinite_losses_total") == 1
    d.handle(protocol.NonFiniteLoss(2.5e-4, 2, 0))
    assert status.notes == [
        "a loss was not a number, so learning went back to the weights saved after frame 7 and halved its rate "
        "(now 0.0005)",
        "a loss was not a number, so learning went back to its start and halved its rate (now 0.00025)",
    ]
    assert [n for n in parts.notices if n["type"] == "note"] == [{"type": "note", "note": t} for t in status.notes]
    d.handle(protocol.CheckpointWritten(20))
    d.handle(protocol.CheckpointWritten(-1, None, "no space left on the disk"))
    assert status.checkpoint_frames == 20
    assert parts.metric("overtime_checkpoint_failures_total") == 1


def test_what_learning_bought_is_shown_and_going_back_to_the_best_weights_is_said(parts):
    """The frames the frozen start scored make the stream's standing against it (the API's ``versus_start``, the
    metrics); a learner fallen behind its start says in the stream's notes that it went back to its best weights."""
    d, status = parts.dispatcher, parts.status
    d.handle(EXAMPLES[0])
    d.handle(frame_learned(0))
    d.handle(frame_learned(1, start_scored=protocol.StartScored(0, 0.5, 1.0)))  # frame 0's, its layers run on after it
    d.handle(frame_learned(2, start_scored=protocol.StartScored(2, 0.5, 0.25)))
    standing = status.versus_start.standing()
    assert standing is not None and standing.ratio == pytest.approx(1.0 / 1.25) and standing.scored == 2
    assert parts.metric("overtime_learning_versus_start") == pytest.approx(0.8)
    assert parts.metric("overtime_loss_start_weights") == 0.25
    assert [message["start_scored"] for message, _ in parts.shown[-3:]] == [
        None,
        {"frame": 0, "loss": 0.5, "loss_start": 1.0},
        {"frame": 2, "loss": 0.5, "loss_start": 0.25},
    ]
    d.handle(protocol.WentBackToBest(120, 1.07, 10))
    assert parts.counts.counters.went_back_to_best == 1 and parts.metric("overtime_went_back_to_best_total") == 1
    assert "went back to its best weights" in status.notes[-1] and "1.07" in status.notes[-1]
    assert parts.notices[-1] == {"type": "note", "note": status.notes[-1]}  # the page and `overtime watch` say it
    assert status.versus_start.standing() is None  # the window starts afresh with the weights it went back to
    d.handle(protocol.FeedRead(4.25, "starved_codec", True))
    assert "at 4.2 s" in status.notes[-1] and "starved" in status.notes[-1] and "learn faster" in status.notes[-1]
    assert "remembers the flows before" in status.notes[-1]
    d.handle(protocol.FeedRead(9.0, "starved_codec", False))
    assert status.notes[-1] == "at 9.0 s the frames no longer show a starved codec: learning and showing as before"
    d.handle(protocol.FeedRead(12.0, "noisy_camera", True))
    assert "at 12.0 s" in status.notes[-1] and "night camera" in status.notes[-1] and "smoothed" in status.notes[-1]
    d.handle(protocol.FeedRead(15.5, "noisy_camera", False))
    assert (
        status.notes[-1].startswith("at 15.5 s the camera's noise no longer outweighs")
        and "as they come" in status.notes[-1]
    )
    d.handle(protocol.FeedRead(16.0, "flickering_light", True))
    assert "at 16.0 s the light flickers" in status.notes[-1] and "one light row by row" in status.notes[-1]
    d.handle(protocol.FeedRead(20.0, "sharpened_frames", True))
    assert "at 20.0 s the net's flow agrees with itself better on sharpened" in status.notes[-1]
    assert set(dispatch.FEED_NOTES) == set(KNOWN_MOTION.feed(seed=0).reads)  # every reading has its words


# -- checkpoint acknowledgements ------------------------------------------------------------------------------------
def answering(parts: Parts, frames: int, error: str | None = None):
    """A learner that answers each request on another thread, through the dispatcher."""

    def send(request: protocol.CheckpointRequest) -> None:
        answer = protocol.CheckpointWritten(frames, request.id, error)
        threading.Thread(target=parts.dispatcher.handle, args=(answer,)).start()

    return send


def test_a_checkpoint_request_gets_its_answer(parts):
    assert parts.acks.request(answering(parts, 42), timeout_s=5.0) == 42
    assert parts.status.checkpoint_frames == 42
    with pytest.raises(CheckpointFailed, match="no space"):
        parts.acks.request(answering(parts, -1, "no space left on the disk"), timeout_s=5.0)
    assert parts.acks.request(lambda request: None, timeout_s=0.05) is None  # nobody answered


def test_the_decoder_reports_typed_stats():
    sent: list = []
    report = Reporter(type("Events", (), {"put": staticmethod(sent.append)})())
    report.decoded, report.position = 3, 1.25
    report.drop("resample", 2)
    report.send(protocol.SourceEnded(live=False))
    assert sent == [protocol.DecoderStats(3, {"resample": 2}, 1.25), protocol.SourceEnded(live=False)]


# -- one source for a stream's settings -----------------------------------------------------------------------------
def stream_config(**changes) -> StreamConfig:
    values = dict(name="cam", source="demo", spec=SourceSpec("demo", "/media/demo.mp4", False), fps=None, width=64,
                  height=None, auto=False, model="fast", init="scratch", stages=2, lr=1e-3, schedule="partime",
                  devices=None, loop=True)  # fmt: skip
    return StreamConfig(**{**values, **changes})


def test_process_configurations_derive_from_the_stream_settings(tmp_path: Path):
    settings = Settings(checkpoint_dir=tmp_path, cache_dir=tmp_path / "cache")
    cfg = stream_config()
    dcfg = decoder_config(cfg, settings, start_at_s=4.0)
    assert (dcfg.source, dcfg.fps, dcfg.loop, dcfg.start_at_s) == (cfg.spec, None, True, 4.0)
    assert (dcfg.max_fps, dcfg.display_side, dcfg.read_timeout_s) == (
        settings.max_fps, settings.display_side, settings.read_timeout_s)  # fmt: skip
    lcfg = learner_process_config(cfg, settings, (640, 480), 25.0, lr=5e-4)
    assert lcfg.learner.lr == 5e-4 and lcfg.learner.checkpoint_path == tmp_path / "cam.pt"
    assert lcfg.ladder == ((64, 48),) and not lcfg.auto and (lcfg.display, lcfg.fps) == ((640, 480), 25.0)
    assert (lcfg.learner.model, lcfg.learner.stages, lcfg.learner.schedule) == ("fast", 2, "partime")


def test_the_api_shows_every_setting_it_does_not_track_itself():
    shown = shown_settings(stream_config(), StreamInfo.model_fields)
    assert shown == {"name": "cam", "source": "demo", "auto": False, "model": "fast", "init": "scratch",
                     "stages": 2, "schedule": "partime", "loop": True}  # fmt: skip


def test_a_source_that_changes_size_or_holds_one_frame_says_so_once(parts):
    d, status = parts.dispatcher, parts.status
    d.handle(protocol.SourceOpened({"codec": "h264", "width": 640, "height": 480}, 25.0, (640, 480)))
    for _ in range(2):  # the source read again after a reconnect says it again
        d.handle(protocol.SourceResized((640, 480), (1280, 960), 12.5, (640, 480), True))
    assert status.notes == [
        "at 12.5 s the source's frames changed size from 640×480 to 1280×960: they are scaled to the stream's picture "
        "(640×480), and the pair across the change is not learned from"
    ]
    assert status.display == (640, 480)
    d.handle(protocol.SourceResized((1280, 960), (720, 1280), 20.0, (360, 640), True))  # a phone turned
    assert status.display == (360, 640) and status.notes[-1] == (
        "at 20.0 s the source's frames changed size from 1280×960 to 720×1280: the stream's picture takes their shape "
        "(360×640), and the pair across the change is not learned from"
    )
    d.handle(protocol.SourceResized((720, 1280), (640, 480), 30.0, (640, 480), False))  # and back: no new size
    assert status.display == (640, 480) and len(status.notes) == 2
    assert [n["note"] for n in parts.notices if n["type"] == "note"] == status.notes
    d.handle(protocol.DecoderStats(1))
    d.handle(protocol.SourceEnded(live=False))
    assert "after a single frame" in status.notes[-1]
