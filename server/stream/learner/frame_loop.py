"""What the learner process does with every frame, and the state it keeps between frames (``FrameLoop``).

Per frame (the picture, from the ring) it scales the frame down to the learning size, forms the pair (previous,
current), calls ``Pipeline.step`` once (``Learner.step``: the pair shown and the pair learned from), and publishes what
leaves the pipeline (PARTIME: the output of step t belongs to frame t-(D-1)): the raw flow field, the pictures viewers
want (``pictures.py``), the loss and the loss of zero flow on what it learned from, now and then the frozen start's
loss on an earlier frame's pair beside the learner's (``start_score.py``: the start's layers run a few a frame;
``versus_start.py``: a learner fallen behind its start goes back to its best weights), ΔP for the whole
step and per stage, the whole frame's work, and the frame's capture time. On a GPU it publishes one frame later still,
so that the host's part of a frame runs while the device learns the next. The budget controller
(``budget.py``) sees every frame's work and may move the learning size, under the cap that keeps the motion within the
net's reach (``reach.py``, which sees every frame's flow); the learner then rebuilds its pipeline at the new size with
the same weights, as it does at the sizes of a new shape when the source turns its picture. A non-finite loss
restores the last checkpoint and halves the learning rate.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np
import torch

from models.scene_cuts import SceneCuts
from pipeline_core import StepResult

from ..pictures import JPEG_KINDS, FlowScale, Painter, mask_kinds
from ..protocol import BudgetChanged, FeedRead, FrameLearned, NonFiniteLoss, StartScored, WentBackToBest
from ..ring import FrameRing
from ..sizing import Size, made_for_side
from .budget import BudgetController
from .device_io import FrameUpload, HostCopy, PendingCopy
from .learner import Learner
from .process_config import LearnerProcessConfig
from .reach import MotionCap
from .source_pace import SourcePace
from .start_score import Scoring, StartScorer
from .versus_start import VersusStart

log = logging.getLogger(__name__)
RESERVE_WEIGHT = 0.1  # how fast the measured cost of the pictures follows new measurements


@dataclass
class InPipeline:
    """A frame inside the pipeline: what its results need once they come out."""

    picture: np.ndarray
    capture_time: float
    loss_zero: torch.Tensor  # zero flow's loss on what its step learned from, on the learner's device
    scene_cut: bool  # it began a new shot (paired with itself)
    frames: int  # how many frames of the stream its pair spans: more than one where the worker skipped some
    learns: bool = True  # its step had something to learn from (``models.feeds.Feed.learns``); else its loss is 0
    scored: Scoring | None = None  # the frozen start's scoring of what this frame's step learned from, if it has one
    start_done: Scoring | None = None  # a scoring whose last layers ran on this frame (its loss comes down with it)


@dataclass
class Outgoing:
    """A frame's results on their way to the host, with what its pictures need."""

    result: StepResult
    copy: PendingCopy
    frame: InPipeline


class FrameLoop:
    """Everything done per frame, and the state it needs between frames.

    ``lag``: how many frames' results may wait on their way to the host while the next step is queued. On a GPU one
    (the default there): the host paints frame t-1 while the device learns frame t, so a frame costs about the larger
    of the two rather than their sum, for one frame more of latency. On CPU none: the step is the host's work."""

    def __init__(self, cfg: LearnerProcessConfig, learner: Learner, controller: BudgetController, ring: FrameRing,
                 out: Any, remember_size: Any, lag: int | None = None) -> None:  # fmt: skip
        self.cfg, self.learner, self.controller, self.ring, self.out = cfg, learner, controller, ring, out
        self.remember_size = remember_size
        self.painter = Painter(cfg.jpeg_quality)
        self.scale = FlowScale()
        self.display = cfg.display  # the picture's size now: the source may turn it (``_new_picture``)
        self.reach = MotionCap(cfg.ladder, made_for_side(*cfg.display))
        self.upload = FrameUpload(learner.device)
        self.lag = (1 if learner.device.type == "cuda" else 0) if lag is None else lag
        self.shares_cores = learner.device.type == "cpu"  # the stages' work takes the host's cores (``_keep_budget``)
        self.host = HostCopy(in_flight=max(1, self.lag))
        self.previous: torch.Tensor | None = None  # the previous frame at the learning size, on the learner's device
        self.previous_picture: np.ndarray | None = None
        self.pace = SourcePace()  # how often the source really sends frames: the frame budget's ΔS
        self.cuts = SceneCuts()  # a frame that begins a new shot is paired with itself: no flow, nothing to learn
        self.feed_reads: dict[str, bool] = {}  # what the learner's feed reads of the frames (said on a change)
        self.shot: int | None = None  # the decoder's shot of the previous frame (a looping file's restarts)
        self.pending: deque[InPipeline] = deque()  # frames inside the pipeline
        self.outgoing: deque[Outgoing] = deque()  # frames out of the pipeline, their results on the way (``lag``)
        self.note = controller.note()
        self.reserve = self._measure_pictures()  # what every picture of a frame costs, wanted or not
        self.start_scorer = StartScorer(VersusStart(), lambda: controller.ds)

    def _measure_pictures(self) -> float:
        """The pictures' cost is part of the frame budget even while nobody watches: a viewer may join any time."""
        picture = np.zeros((self.cfg.display[1], self.cfg.display[0], 3), np.uint8)
        flow = np.zeros((self.learner.size[1], self.learner.size[0], 2), np.float32)
        seconds = []
        for _ in range(3):
            t0 = time.perf_counter()
            self.painter.render(picture, flow, 1.0, list(JPEG_KINDS))
            seconds.append(time.perf_counter() - t0)
        return min(seconds)

    def scaled(self, picture: np.ndarray) -> torch.Tensor:
        """The picture at the learning size, on the learner's device."""
        w, h = self.learner.size
        if picture.shape[:2] != (h, w):
            picture = cv2.resize(picture, (w, h), interpolation=cv2.INTER_AREA)
        return self.upload(picture)

    def on_frame(self, picture: np.ndarray, capture_time: float, shot: int, seq: int, source_time: float) -> None:
        """A frame as the ring hands it out (``ring.RingFrame``)."""
        start = time.perf_counter()
        restarted, self.shot = self.shot is not None and shot != self.shot, shot  # a looping file's first frame again
        turned = (picture.shape[1], picture.shape[0]) != self.display
        if turned:
            self._new_picture((picture.shape[1], picture.shape[0]))
        cut = self.cuts(picture) or restarted or turned
        current = self.scaled(picture)
        previous, self.previous, self.previous_picture = self.previous, current, picture
        frames = self.pace.observe(source_time, seq)
        self.controller.pace(self.pace.interval)
        if previous is None:
            return
        x = torch.cat([current if cut else previous, current])[None]
        learner = self.learner
        epochs, stepping = learner.pipe.epochs, time.perf_counter()
        loss_zero, r = learner.step(x, contiguous=frames == 1)
        stepped = time.perf_counter() - stepping
        learns = learner.feed.learns
        for reading, holds in learner.feed.reads.items():
            if self.feed_reads.get(reading, False) != holds:
                self.feed_reads[reading] = holds
                self.out.put(FeedRead(source_time, reading, holds))
        scored, start_done, start_s = self.start_scorer.after_step(learner.start_score, learns)
        self.pending.append(InPipeline(picture, capture_time, loss_zero, cut, frames, learns, scored, start_done))
        if learner.pipe.epochs != epochs:
            self.pending.clear()  # the pipeline started afresh (a step its CUDA graph could not capture)
        if r is not None:
            self._send_off(r)
        while len(self.outgoing) > self.lag:
            if (costs := self._publish(self.outgoing.popleft(), start)) is not None:
                work_s, pictures_s, waited_s, dp_s = costs
                # The frozen start's layers, where they ran, replaced by their steady share (``StartScorer``).
                work_s += self.start_scorer.share_s - start_s - pictures_s + self.reserve
                self._keep_budget(work_s, stepped + waited_s, dp_s)
                stepped = start_s = 0.0  # counted once

    def _new_picture(self, display: Size) -> None:
        """The source's picture changed shape (a phone turned on its side, another camera): the learner goes on from
        the same weights at the sizes of the new shape, the one closest in cost to where it was (``BudgetController
        .new_ladder``); its first frame is paired with itself, as the decoder began a new shot there."""
        self.display = display
        ladder = self.cfg.sizes.ladder(display)
        self.controller.new_ladder(ladder)
        self.reach = MotionCap(ladder, made_for_side(*display))
        self._rebuild(lambda: self.learner.resize(self.controller.size))
        self.note = self.controller.note()
        self.out.put(BudgetChanged(self.controller.size, self.note))

    def _send_off(self, r: StepResult) -> None:
        """Queue the copies to the host of what left the pipeline for the oldest frame inside it."""
        frame = self.pending.popleft()
        assert r.output is not None and r.loss_tensor is not None
        device = r.loss_tensor.device
        done = frame.start_done
        start = done.score.loss if done is not None else None
        start = start if start is not None else torch.full((), float("nan"), device=device)
        copy = self.host.start(
            flow=r.output[0].permute(1, 2, 0).contiguous(),
            losses=torch.stack([t.to(device, torch.float32) for t in (r.loss_tensor, frame.loss_zero, start)]),
        )
        self.outgoing.append(Outgoing(r, copy, frame))

    def _publish(self, going: Outgoing, start: float) -> tuple[float, float, float, float] | None:
        """Send a frame's results; the frame's work, its pictures' share, how long the host waited for the results
        to come down and the step's time (ΔP). A non-finite loss publishes nothing: the learner goes back to its last
        good weights (None)."""
        r, frame = going.result, going.frame
        shown = frame.picture
        waiting = time.perf_counter()
        got = going.copy.result()
        waited_s = time.perf_counter() - waiting
        loss, loss_zero, loss_start = (float(v) for v in got["losses"])
        if not math.isfinite(loss):
            self._recover()
            return None
        if frame.scored is not None:
            frame.scored.frame, frame.scored.learned = r.frame, loss
        start_scored = None
        done = frame.start_done
        if done is not None and done.frame is not None and done.learned is not None and math.isfinite(loss_start):
            start_scored = StartScored(done.frame, done.learned, loss_start)
            self._judge_learning(r.frame, start_scored)
        flow = got["flow"]
        self.reach.observe(flow, frame.frames)
        scale = self.scale.update(flow, shown.shape[1] / flow.shape[1])
        kinds = mask_kinds(self.ring.wanted)
        painted = time.perf_counter()
        images = self.painter.render(shown, flow, scale, kinds)
        pictures_s = time.perf_counter() - painted
        if len(kinds) == len(JPEG_KINDS):
            self.reserve += RESERVE_WEIGHT * (pictures_s - self.reserve)
        work_s = time.perf_counter() - start
        # As the budget counts it (``_keep_budget``): on CPU at least ΔP, whose stages start before the frame's clock.
        frame_work_s = max(work_s, r.step_seconds) if self.shares_cores else work_s
        if not frame.learns:  # a made pair served known nowhere: its losses are 0 by construction, not a measure
            loss = loss_zero = None
        self.out.put(FrameLearned(
            frame=r.frame, loss=loss, loss_zero=loss_zero, start_scored=start_scored, dp_s=r.step_seconds,
            stage_dp_s=list(r.stage_seconds), work_s=frame_work_s, ds_s=self.controller.ds,
            capture_time=frame.capture_time, learning_size=(flow.shape[1], flow.shape[0]),
            flow_scale=scale, flow=flow, images=images, scene_cut=frame.scene_cut,
        ))  # fmt: skip
        return work_s, pictures_s, waited_s, r.step_seconds

    def _judge_learning(self, frame: int, scored: StartScored) -> None:
        """A frame the frozen start scored (out by ``frame``): keep the weights of the best window so far, or go back
        to them when a window has fallen behind the start (``versus_start``)."""
        verdict = self.start_scorer.versus.add(scored.loss, scored.loss_start)
        if verdict is not None and verdict.kind == "best":
            self.learner.keep_best()
        elif verdict is not None and verdict.kind == "behind":
            self.learner.go_back_to_best()
            self.start_scorer.cancel()
            self.pending.clear()
            self.outgoing.clear()  # learned with the weights just left
            self.out.put(WentBackToBest(frame, verdict.standing.ratio, verdict.standing.scored))

    def _recover(self) -> None:
        """After a non-finite loss: the last good weights, half the rate; the frames in flight are gone."""
        learner = self.learner
        learner.recover()
        self.start_scorer.cancel()
        self.pending.clear()
        self.outgoing.clear()  # learned with the weights just thrown away
        self.out.put(NonFiniteLoss(learner.lr, learner.nonfinite, learner.resumed_from))

    def _keep_budget(self, work_s: float, step_s: float, dp_s: float) -> None:
        """``step_s``: the part of the frame's work that the learning size decides, the host's time in the step and in
        waiting for its results. On CPU that is the step; on a GPU, whose step runs beside the host's work, only the
        wait: none while the host is the slower, where no smaller size would help and a move's rebuild costs frames
        (the step's device time, counted instead, walked streams down for nothing: docs/operations.md#gpus). On CPU
        a frame costs at least ``dp_s`` (ΔP): stages started early work on the host's cores, and by its wait alone
        they looked free until they fell behind (docs/notebook/2026-11-30-where-a-cpu-frame-waits.md)."""
        work_s, step_s = (max(work_s, dp_s), max(step_s, dp_s)) if self.shares_cores else (work_s, step_s)
        controller = self.controller
        choice = controller.limit(self.reach.top)
        if choice is None:
            choice = controller.observe(work_s, step_s)
        if choice is not None:
            self._rebuild(lambda: self.learner.resize(controller.size))
            self.previous = None if self.previous_picture is None else self.scaled(self.previous_picture)
        elif self.learner.compiled_ready:
            self._rebuild(self.learner.adopt_compiled)
            log.info("the learner's stages are compiled: it goes on with them at %dx%d", *self.learner.size)
        elif self._size_to_remember():
            self.remember_size(controller.size)
        note = controller.note()
        if note != self.note or choice is not None:
            self.note = note
            self.out.put(BudgetChanged(controller.size, note))

    def _size_to_remember(self) -> bool:
        """Whether the size the budget settled on is worth remembering for the stream's next start: one it chose
        (automatic sizing) for the rate said, not a cap's (the motion's) nor a slow source's, and for the picture the
        source opens with."""
        c = self.controller
        chosen = c.settled and self.cfg.auto and not (c.capped or c.source_slower)
        return chosen and self.display == self.cfg.display

    def _rebuild(self, rebuild: Callable[[], None]) -> None:
        """A new pipeline for the learner (another size, compiled stages): the frames inside the old one come out
        first, not lost."""
        self.finish()
        rebuild()

    def finish(self) -> None:
        """Every frame inside the pipeline learned and published: before a rebuild, and once the source has ended
        (else a file's last frames, a short clip's every frame, would go unlearned)."""
        for r in self.learner.flush():
            if not self.pending:  # a non-finite loss among them threw the frames in flight away
                break
            self._send_off(r)
            while len(self.outgoing) > self.lag:  # no more copies waiting than HostCopy has buffers for
                self._publish(self.outgoing.popleft(), time.perf_counter())
        while self.outgoing:
            self._publish(self.outgoing.popleft(), time.perf_counter())
