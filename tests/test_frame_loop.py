"""The learner process's per-frame loop keeps the frame budget: made slow on purpose, it moves to a smaller learning
size, rebuilds the pipeline there with the same weights, loses no frame on the way (those in flight come out at the
old size) and says so. Each test runs as on CPU (a frame's results read at once) and as on a GPU (read one frame
later, while the next step runs: ``lag`` 1)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import cv2
import numpy as np
import pytest
import torch
from torch import nn

from models.streams import load_photo
from pipeline_core import StepResult
from server.stream.learner import budget, versus_start
from server.stream.learner.learner import Learner
from server.stream.learner.start_score import StartScore
from server.stream.learner.versus_start import VersusStart
from server.stream.protocol import (
    BudgetChanged,
    FrameLearned,
    FramesDropped,
    NonFiniteLoss,
    WentBackToBest,
)
from tests.frame_loop_support import DISPLAY, FPS, make_loop

pytestmark = pytest.mark.realtime


@pytest.fixture(params=[0, 1], ids=["lag0", "lag1"])
def loop(request, tmp_path, monkeypatch):
    monkeypatch.setattr(budget, "WINDOW_S", 0.6)  # decide on 6 frames, not 20 (a quicker test)
    frame_loop = make_loop(tmp_path, request.param)
    yield frame_loop
    frame_loop.learner.pipe.close()


def test_a_lag_publishes_the_same_results_a_frame_later(tmp_path):
    """Read one frame later (as on a GPU, where the host paints while the device learns the next frame), a frame's
    results are those read at once."""
    loops = [make_loop(tmp_path / str(lag), lag, auto=False) for lag in (0, 1)]
    pictures = np.random.default_rng(2).integers(0, 255, (8, DISPLAY[1], DISPLAY[0], 3), np.uint8)
    for i, picture in enumerate(pictures):
        for frame_loop in loops:
            frame_loop.on_frame(picture, i / FPS, 0, i, i / FPS)
        at_once, later = ([m for m in fl.out if isinstance(m, FrameLearned)] for fl in loops)
        assert len(later) == max(0, len(at_once) - 1)
    assert len(later) >= 4
    for a, b in zip(at_once, later, strict=False):
        assert (a.frame, a.capture_time, a.learning_size) == (b.frame, b.capture_time, b.learning_size)
        assert a.loss == b.loss and a.loss_zero == b.loss_zero and np.array_equal(a.flow, b.flow)
    for frame_loop in loops:
        frame_loop.learner.pipe.close()


def slow_steps(learner: Learner, seconds_at_largest: float, largest: tuple[int, int]) -> None:
    """Every step also sleeps in proportion to the learning size's pixels, as a slower machine would take."""
    step = learner.step

    def slowed(x: torch.Tensor, contiguous: bool = True):
        time.sleep(seconds_at_largest * x.shape[-1] * x.shape[-2] / (largest[0] * largest[1]))
        return step(x, contiguous)

    learner.step = slowed


def test_slow_steps_shrink_the_learning_size_and_say_so(loop):
    largest = loop.learner.size
    slow_steps(loop.learner, 0.3, largest)  # 3 x ΔS at the largest size
    rng = np.random.default_rng(0)
    pictures = rng.integers(0, 255, (40, DISPLAY[1], DISPLAY[0], 3), np.uint8)
    for i, picture in enumerate(pictures):
        loop.on_frame(picture, i / FPS, 0, i, i / FPS)
        if loop.learner.size != largest and all(isinstance(m, FrameLearned) for m in loop.out[-3:]):
            break
    others = [m for m in loop.out if not isinstance(m, FrameLearned)]
    assert loop.learner.size < largest, f"still learning at {largest}: {others}"
    budgets = [m for m in loop.out if isinstance(m, BudgetChanged)]
    assert budgets and tuple(budgets[-1].learning_size) == loop.learner.size
    frames = [m for m in loop.out if isinstance(m, FrameLearned)]
    assert not [m for m in loop.out if isinstance(m, FramesDropped)]
    assert [m.frame for m in frames] == list(range(len(frames)))  # every frame out, in order, across the moves
    assert len({tuple(m.learning_size) for m in frames}) >= 2
    last = frames[-1]
    w, h = loop.learner.size
    assert tuple(last.learning_size) == (w, h) and last.flow.shape == (h, w, 2)  # the rebuilt pipeline's flow
    assert set(last.images) == {"overlay", "frame", "flow"} and np.isfinite(last.loss_zero)
    assert last.work_s >= last.dp_s > 0


@pytest.mark.parametrize("shares_cores", [False, True], ids=["gpu", "cpu"])
def test_the_budget_counts_what_the_host_spends_on_a_gpu_step_and_at_least_the_step_on_cpu(loop, shares_cores):
    """On a GPU a step's clock is the device's and the step runs beside the host's work: the part of a frame's work
    that a smaller size would save is the host's time in the step and in waiting for its results. Here each step takes
    the host its own time and 20 ms more while its clock claims 5 s, as a device step overlapped with the host's work
    would. On CPU stages that work beside the host (started early) take its cores: a frame costs at least the step."""
    loop.shares_cores = shares_cores
    step = loop.learner.step

    def overlapped(x: torch.Tensor, contiguous: bool = True):
        time.sleep(0.02)
        zero, r = step(x, contiguous)
        if r is None:  # nothing left the pipeline yet (it fills)
            return zero, None
        device_clock = SimpleNamespace(seconds=5.0)  # the step's span as a device's events would tell it
        return zero, StepResult(r.output, r.loss_tensor, r.frame, device_clock, list(r.stage_seconds))

    loop.learner.step = overlapped
    seen: list[float] = []
    observe = loop.controller.observe
    loop.controller.observe = lambda work_s, step_s=None: seen.append(step_s) or observe(work_s, step_s)
    rng = np.random.default_rng(0)
    for i, picture in enumerate(rng.integers(0, 255, (8, DISPLAY[1], DISPLAY[0], 3), np.uint8)):
        loop.on_frame(picture, i / FPS, 0, i, i / FPS)
    frames = [m for m in loop.out if isinstance(m, FrameLearned)]
    assert frames and all(m.dp_s == 5.0 for m in frames)  # ΔP as the metrics show it: the step's own clock
    assert len(seen) == len(frames) and all((s >= 5.0) if shares_cores else (0.02 <= s < 2.0) for s in seen), seen


def test_a_source_slower_than_its_rate_keeps_the_size_its_own_pace_holds(loop):
    """Steps 3 x ΔS at the largest size, but the source sends a frame a second while it says 10 fps (a file whose
    encoder left frames out): each frame has a second, so the size stays, the frames say so and so does the note."""
    largest = loop.learner.size
    slow_steps(loop.learner, 0.3, largest)
    rng = np.random.default_rng(3)
    for i, picture in enumerate(rng.integers(0, 255, (16, DISPLAY[1], DISPLAY[0], 3), np.uint8)):
        loop.on_frame(picture, float(i), 0, i, float(i))
    frames = [m for m in loop.out if isinstance(m, FrameLearned)]
    assert loop.learner.size == largest and all(tuple(m.learning_size) == largest for m in frames)
    assert frames[0].ds_s == pytest.approx(1 / FPS) and frames[-1].ds_s == pytest.approx(1.0)
    assert "the source sends that, though it says 10 fps" in loop.note and loop.controller.settled
    assert loop.start_scorer.frame_s() == pytest.approx(1.0)  # the frozen start's scorings spaced by that time too


def test_a_decoder_slower_than_its_source_does_not_lengthen_the_budget(loop):
    """Frames written a second apart (a decoder behind its file on busy cores) whose timestamps are the rate's: ΔS
    stays the rate's, or a larger learning size would take more of the cores the decoder needs."""
    rng = np.random.default_rng(4)
    for i, picture in enumerate(rng.integers(0, 255, (12, DISPLAY[1], DISPLAY[0], 3), np.uint8)):
        loop.on_frame(picture, float(i), 0, i, i / FPS)
    frames = [m for m in loop.out if isinstance(m, FrameLearned)]
    assert frames and all(m.ds_s == pytest.approx(1 / FPS) for m in frames) and not loop.controller.source_slower


def test_a_non_finite_loss_restores_the_last_good_weights_says_so_and_learns_on(loop):
    """The loss is read on the host only once the frame's results are copied there; a NaN one (a poisoned frame)
    sends the learner back to its checkpoint at half the rate, and the frames in flight are not published."""
    loop.learner.save()
    rng = np.random.default_rng(1)
    pictures = rng.integers(0, 255, (10, DISPLAY[1], DISPLAY[0], 3), np.uint8)
    for i, picture in enumerate(pictures):
        if i == 4:
            loop.learner.poison_next = True
        loop.on_frame(picture, i / FPS, 0, i, i / FPS)
    (failure,) = [m for m in loop.out if isinstance(m, NonFiniteLoss)]
    assert failure.count == 1 and loop.learner.nonfinite == 1
    frames = [m for m in loop.out if isinstance(m, FrameLearned)]
    assert all(np.isfinite(m.loss) for m in frames)
    after = loop.out.index(failure)
    assert any(isinstance(m, FrameLearned) for m in loop.out[after:])  # it learns on


def test_fast_motion_moves_a_large_learning_size_down_to_where_the_net_follows_it(tmp_path):
    """A picture larger than the size the nets were made for is learned at its own size while the motion is slow,
    but a pan of 24 px a frame at 320x240 would outrun the net's search there: the loop rebuilds at 160x120, where it
    is 12 px, and says why."""
    loop = make_loop(tmp_path, lag=0, display=(320, 240), init="pretrained")
    try:
        for i, picture in enumerate(pan(12)):
            loop.on_frame(picture, i / FPS, 0, i, i / FPS)
            if loop.learner.size != (320, 240):
                break
        assert loop.learner.size == (160, 120), [m for m in loop.out if not isinstance(m, FrameLearned)]
        frames = [m for m in loop.out if isinstance(m, FrameLearned)]
        assert tuple(frames[-1].learning_size) == (320, 240)  # the frame that showed the motion, at the old size
        assert np.percentile(np.hypot(*frames[-1].flow.transpose(2, 0, 1)), 50) > 12  # the net saw the pan
        (budget_note,) = [m for m in loop.out if isinstance(m, BudgetChanged)]
        assert budget_note.learning_size == (160, 120) and "motion is this fast" in budget_note.note
    finally:
        loop.learner.pipe.close()


def test_a_pan_seen_through_skipped_frames_is_as_slow_as_it_is(tmp_path):
    """The same 24 px between the frames the worker got, but 4 frames of the stream apart (the worker skipped the
    others, as while a rebuild runs): 6 px a frame, within reach at 320x240, so the size stays."""
    loop = make_loop(tmp_path, lag=0, display=(320, 240), init="pretrained")
    try:
        for i, picture in enumerate(pan(8)):
            loop.on_frame(picture, 4 * i / FPS, 0, 4 * i, 4 * i / FPS)
        frames = [m for m in loop.out if isinstance(m, FrameLearned)]
        assert len(frames) == 6 and all(tuple(m.learning_size) == (320, 240) for m in frames)  # 1 in the pipeline
        assert all(m.ds_s == pytest.approx(1 / FPS) for m in frames)  # frames the worker skipped: the source's rate
        assert np.percentile(np.hypot(*frames[-1].flow.transpose(2, 0, 1)), 50) > 12  # the net saw 24 px a pair
    finally:
        loop.learner.pipe.close()


def test_a_picture_turned_on_its_side_is_learned_at_its_own_shape_from_the_same_weights(loop):
    """A phone turned mid-stream: the decoder sends pictures of the new shape (``sizing.picture_for``), and the learner
    goes on at the learning size of that shape, not squashed into the old one, from the weights it had."""
    landscape = views("astronaut", 4)
    portrait = [np.ascontiguousarray(np.rot90(picture)) for picture in views("coffee", 4)]
    for i, (picture, shot) in enumerate(zip(landscape + portrait, [0] * 4 + [1] * 4, strict=True)):
        loop.on_frame(picture, i / FPS, shot, i, i / FPS)
    for r in loop.learner.pipe.flush():
        loop._send_off(r)
    while loop.outgoing:
        loop._publish(loop.outgoing.popleft(), time.perf_counter())
    frames = {m.frame: m for m in loop.out if isinstance(m, FrameLearned)}
    assert [frames[f].scene_cut for f in sorted(frames)] == [f == 3 for f in sorted(frames)]
    assert {tuple(frames[f].learning_size) for f in frames if f < 3} == {DISPLAY}
    assert {tuple(frames[f].learning_size) for f in frames if f >= 3} == {DISPLAY[::-1]}
    assert frames[6].flow.shape == (DISPLAY[0], DISPLAY[1], 2) and np.isfinite(frames[6].loss)
    assert [tuple(m.learning_size) for m in loop.out if isinstance(m, BudgetChanged)] == [DISPLAY[::-1]]
    assert loop.controller.ladder[0] == DISPLAY[::-1] and loop.display == DISPLAY[::-1]


def test_a_looping_files_first_frame_again_is_paired_with_itself(loop):
    """At a looping file's seam the picture jumps back to its first frame, which the colour test does not call a cut
    (the same scene): the decoder's shot count says it, and the frame is paired with itself, as at a cut."""
    pictures = views("astronaut", 4)
    for i, (picture, count) in enumerate(zip(pictures * 2, [0] * 4 + [1] * 4, strict=True)):
        loop.on_frame(picture, i / FPS, count, i, i / FPS)
    frames = {m.frame: m for m in loop.out if isinstance(m, FrameLearned)}
    assert [frames[f].scene_cut for f in sorted(frames)] == [f == 3 for f in sorted(frames)]
    assert frames[3].loss_zero < 0.1 * min(frames[2].loss_zero, frames[4].loss_zero)


def views(photo: str, count: int) -> list[np.ndarray]:
    """``count`` views of a photo at the display size, each 8 px further down."""
    image = load_photo(photo)
    scaled = [cv2.resize(image[8 * i : 8 * i + 192, :256], DISPLAY, interpolation=cv2.INTER_AREA) for i in range(count)]
    return [np.clip(view, 0, 255).astype(np.uint8) for view in scaled]


def pan(count: int, px: int = 24) -> list[np.ndarray]:
    """``count`` 320x240 views of a blurred noise texture, each ``px`` further right."""
    rng = np.random.default_rng(3)
    texture = cv2.GaussianBlur(rng.integers(0, 255, (240, 320 + px * count, 3), np.uint8), (0, 0), 2.0)
    return [np.ascontiguousarray(texture[:, px * i : px * i + 320]) for i in range(count)]


def test_a_frame_that_begins_a_new_shot_is_paired_with_itself(loop):
    """A cut from one photo to another: the first frame of the new shot has no flow to find, and nothing to learn."""
    pictures = views("astronaut", 3) + views("coffee", 3)
    for i, picture in enumerate(pictures + pictures[-1:]):
        loop.on_frame(picture, i / FPS, 0, i, i / FPS)
    frames = {m.frame: m for m in loop.out if isinstance(m, FrameLearned)}
    assert [frames[f].scene_cut for f in sorted(frames)] == [f == 2 for f in sorted(frames)]
    # Its pair is the frame and itself: zero flow explains it (the loss's floor), unlike its neighbours' pairs.
    assert frames[2].loss_zero < 0.1 * min(frames[1].loss_zero, frames[3].loss_zero)


@pytest.mark.parametrize("lag", [0, 1], ids=["lag0", "lag1"])
def test_the_frozen_start_scores_now_and_then_and_a_learner_behind_it_goes_back_to_its_best(tmp_path, lag, monkeypatch):
    """The frozen start scores every few frames what the step learned from; where a window of them reads the learner
    behind its start, it goes back to its best weights, says so, and learns on, the frames numbered on."""
    # Every second pair whatever a scoring took: on a busy machine one took over 2 % of a frame, and spaced them out
    # (``VersusStart.scored``, tested on its own in test_versus_start.py).
    monkeypatch.setattr(versus_start, "BUDGET_SHARE", 1.0)
    loop = make_loop(tmp_path, lag, auto=False, init="pretrained")
    loop.start_scorer.versus = VersusStart(every=2, window=2, margin=0.02)
    start = weights(loop.learner)
    went_back_to: list[list[torch.Tensor]] = []
    go_back = loop.learner.go_back_to_best
    loop.learner.go_back_to_best = lambda: (go_back(), went_back_to.append(weights(loop.learner)))
    # A start that explains everything, at once (no layers): the learner is behind.
    loop.learner.start_score = lambda judge: StartScore(nn.Sequential(), torch.zeros(1), torch.zeros(1), explains_all)
    rng = np.random.default_rng(3)
    for i, picture in enumerate(rng.integers(0, 255, (12, DISPLAY[1], DISPLAY[0], 3), np.uint8)):
        loop.on_frame(picture, i / FPS, 0, i, i / FPS)
    frames = [m for m in loop.out if isinstance(m, FrameLearned)]
    scored = [(m.frame, m.start_scored.frame) for m in frames if m.start_scored is not None]
    assert scored and all(f % 2 == 1 and f == g for f, g in scored)  # the second pair fed, the fourth, ...: 1, 3, ...
    went = [m for m in loop.out if isinstance(m, WentBackToBest)]
    assert went and went[0].ratio > 1e3 and went[0].scored == 2
    learned = [m for m in frames if m.loss is not None]  # not a made pair served known nowhere
    assert learned[-1].frame > went[0].frame and np.isfinite(learned[-1].loss)  # it learns on
    assert [m.frame for m in frames] == sorted({m.frame for m in frames})  # numbered on, never back
    # No window was ever ahead of the start: the best weights it had were its start's.
    assert went_back_to and all(torch.equal(a, b) for a, b in zip(start, went_back_to[0], strict=True))
    loop.learner.pipe.close()


def explains_all(flow: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return torch.tensor(1e-6)


def test_the_frozen_starts_layers_run_over_the_frames_after_the_one_it_scores(tmp_path):
    """Before any scoring was timed, one layer a frame: the scoring of a frame's learned pair comes with the results
    of the frame its last layer ran on, with the learner's loss on that pair, and the start's loss is its whole
    forward on the pair as it was when the scoring began."""
    loop = make_loop(tmp_path, 0, auto=False, init="pretrained")
    loop.start_scorer.versus = VersusStart(every=3, window=10)
    learner, begun = loop.learner, []
    make = learner.start_score
    learner.start_score = lambda judge: begun.append((s := make(judge), s.x.clone(), s.target.clone())) or s
    rng = np.random.default_rng(4)
    layers = len(learner.start)
    for i, picture in enumerate(rng.integers(0, 255, (layers + 5, DISPLAY[1], DISPLAY[0], 3), np.uint8)):
        loop.on_frame(picture, i / FPS, 0, i, i / FPS)
    frames = [m for m in loop.out if isinstance(m, FrameLearned)]
    carried = [m for m in frames if m.start_scored is not None]
    assert carried, "the start's scoring never came out"
    scored = carried[0].start_scored
    assert scored.frame == 2 and carried[0].frame == scored.frame + layers - 1  # the third pair fed, a layer a frame
    assert scored.loss == next(m.loss for m in frames if m.frame == scored.frame)
    _, pair, target = begun[0]
    with torch.no_grad():
        whole = float(learner.learning.loss_fn(learner.start(pair), target))
    assert scored.loss_start == pytest.approx(whole, rel=1e-6)
    learner.pipe.close()


def test_the_feeds_judgments_ride_on_the_starts_scorings_through_the_whole_start(tmp_path):
    """A judgment the feed offers (every fifth pair: ``models.stream_sharpening``) is run by the next scoring, before
    its pair, through the whole frozen start; the flows the feed gets back are that forward's."""
    loop = make_loop(tmp_path, 0, auto=False, init="pretrained")
    loop.start_scorer.versus = VersusStart(every=1, window=50, margin=1e9)  # a scoring due on every pair it may score
    learner, offered, got = loop.learner, [], []
    offer, take = learner.feed.judgment, learner.feed.judged
    learner.feed.judgment = lambda: (j := offer()) is not None and offered.append(j.clone()) or j
    learner.feed.judged = lambda flows: (got.append(flows.clone()), take(flows))
    rng = np.random.default_rng(5)
    for i, picture in enumerate(rng.integers(0, 255, (80, DISPLAY[1], DISPLAY[0], 3), np.uint8)):
        loop.on_frame(picture, i / FPS, 0, i, i / FPS)
    assert got and len(got) <= len(offered) and len(learner.feed.sharpening.judgments) == len(got)
    with torch.no_grad():
        assert torch.allclose(got[0], learner.start_net(offered[0]), atol=1e-5)
    learner.pipe.close()


def weights(learner: Learner) -> list[torch.Tensor]:
    return [p.detach().clone() for p in learner.pipe.module().parameters()]


@pytest.mark.parametrize("lag", [0, 1], ids=["lag0", "lag1"])
def test_a_frame_whose_step_learned_from_a_pair_known_nowhere_has_no_loss_nor_scoring(tmp_path, lag, monkeypatch):
    """At D = 2 each made pair is served once more known nowhere (``models.known_motion.KnownMotion``): its losses are
    0 by construction, so the frame's loss is none (the charts go on across it), and the frozen start scores none."""
    monkeypatch.setattr(versus_start, "BUDGET_SHARE", 1.0)
    loop = make_loop(tmp_path, lag, auto=False, init="pretrained")
    loop.start_scorer.versus = VersusStart(every=1, window=50, margin=1e9)  # due on every pair it may score
    # A start scored at once (no layers), never far enough ahead to send the learner back.
    loop.learner.start_score = lambda judge: StartScore(nn.Sequential(), torch.zeros(1), torch.zeros(1), explains_all)
    rng = np.random.default_rng(4)
    for i, picture in enumerate(rng.integers(0, 255, (16, DISPLAY[1], DISPLAY[0], 3), np.uint8)):
        loop.on_frame(picture, i / FPS, 0, i, i / FPS)
    frames = [m for m in loop.out if isinstance(m, FrameLearned)]
    # The service's made pairs: every second pair, four servings as made, then one known nowhere: pairs 8 and 9.
    none = [m.frame for m in frames if m.loss is None]
    assert none == [8, 9] and all(m.loss_zero is None for m in frames if m.frame in none)
    assert all(m.loss > 0 and m.loss_zero > 0 for m in frames if m.frame not in none)
    scored = {m.start_scored.frame for m in frames if m.start_scored is not None}
    assert scored and not scored & set(none)
    loop.learner.pipe.close()
