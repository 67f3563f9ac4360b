"""The budget controller: a smaller learning size when a frame's work is over the budget, a larger one when there is
room, no flapping back to a size that was too slow, and words that say what holds."""

from __future__ import annotations

import pytest

from server.stream.learner.budget import (
    MIN_WINDOW,
    RETRY_MAX_S,
    RETRY_S,
    STALE_S,
    TARGET,
    WARMUP_FRAMES,
    WINDOW_S,
    BudgetController,
    pixels,
)
from server.stream.sizing import learning_ladder

LADDER = learning_ladder((160, 120), 160)  # 160x120 down to 64x48


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def run(controller: BudgetController, cost_per_pixel: float, frames: int) -> list[int]:
    """Feed ``frames`` frames whose work is proportional to the current size's pixels; the moves made."""
    moves = []
    for _ in range(frames):
        move = controller.observe(cost_per_pixel * pixels(controller.size))
        if move is not None:
            moves.append(move)
    return moves


def test_a_ladder_of_another_shape_goes_on_at_about_the_same_cost():
    controller = BudgetController(LADDER, 2, fps=10, auto=True)  # 128x96
    assert run(controller, 0.08 / pixels(controller.size), WARMUP_FRAMES + controller.window) == []  # it holds
    (width, height), turned = controller.size, learning_ladder((120, 160), 160)  # the picture turned
    assert controller.estimate is not None and (height, width) in turned
    controller.new_ladder(turned)
    assert controller.size == (height, width) and controller.estimate is None  # the same pixels, measured afresh
    controller.new_ladder(learning_ladder((208, 120), 208))  # a wider picture: the most pixels no more than those
    assert pixels(controller.size) <= width * height < pixels(controller.ladder[controller.index - 1])
    controller.new_ladder(turned)
    assert controller.note() == f"learning at {controller.size[0]}×{controller.size[1]}; measuring what a frame costs"


def test_slow_steps_move_to_the_largest_size_that_holds():
    controller = BudgetController(LADDER, 0, fps=10, auto=True)
    assert "measuring" in controller.note()
    per_pixel = 0.2 / pixels(LADDER[0])  # 200 ms at 160x120: twice ΔS
    run(controller, per_pixel, 200)
    fits = [i for i, size in enumerate(LADDER) if per_pixel * pixels(size) <= TARGET * 0.1]
    assert controller.index == fits[0], "not the largest size that keeps the budget"
    assert controller.settled and "to keep 10 fps" in controller.note()


def test_room_grows_back_one_size_at_a_time_up_to_the_largest():
    controller = BudgetController(LADDER, len(LADDER) - 1, fps=10, auto=True)
    moves = run(controller, 0.02 / pixels(LADDER[0]), 400)  # 20 ms at the largest size: room everywhere
    assert moves == list(range(len(LADDER) - 2, -1, -1)) and controller.index == 0


def test_a_size_that_was_too_slow_is_not_retried_at_once():
    clock = Clock()
    controller = BudgetController(LADDER, 0, fps=10, auto=True, clock=clock)
    window = WARMUP_FRAMES + max(MIN_WINDOW, 20)
    run(controller, 0.12 / pixels(LADDER[0]), window)  # 120 ms at the largest: over
    smaller = controller.index
    assert smaller > 0
    run(controller, 0.01 / pixels(LADDER[0]), 5 * window)  # the load went away...
    assert controller.index == 1, "grew back onto the size that was just too slow"
    clock.now += RETRY_S + 1  # ... and stayed away
    run(controller, 0.01 / pixels(LADDER[0]), 2 * window)
    assert controller.index == 0


def test_one_window_over_the_target_but_within_the_budget_is_not_a_move_two_in_a_row_are():
    controller = BudgetController(LADDER, 0, fps=10, auto=True)
    window = max(MIN_WINDOW, 20)
    held, over = 0.07, 0.09  # a frame's work within 0.85 ΔS, and over it but within ΔS
    assert run(controller, held / pixels(LADDER[0]), WARMUP_FRAMES + window) == []
    assert run(controller, over / pixels(LADDER[0]), window) == [], "moved on one slow window that dropped nothing"
    assert run(controller, held / pixels(LADDER[0]), window) == []
    assert run(controller, over / pixels(LADDER[0]), window) == []
    assert run(controller, over / pixels(LADDER[0]), window) != [], "stayed over the target for two windows"
    assert controller.index > 0


def test_a_size_that_has_not_held_a_window_yet_gets_no_credit():
    controller = BudgetController(LADDER, 0, fps=10, auto=True)
    assert run(controller, 0.09 / pixels(LADDER[0]), WARMUP_FRAMES + max(MIN_WINDOW, 20)) != []


def test_a_size_that_fails_again_waits_twice_as_long_before_the_next_try():
    clock = Clock()
    controller = BudgetController(LADDER, 0, fps=10, auto=True, clock=clock)
    window = WARMUP_FRAMES + max(MIN_WINDOW, 20)
    tries = []
    for _ in range(4):
        assert run(controller, 0.12 / pixels(LADDER[0]), 2 * window)  # over ΔS at the largest size: down at once
        start = clock.now
        while controller.index != 0:  # room at the smaller sizes: back up when the wait is over
            clock.now += 1.0
            run(controller, 0.01 / pixels(LADDER[0]), window)
        tries.append(clock.now - start)
    assert tries[0] >= RETRY_S and all(b >= min(2 * a, RETRY_MAX_S) - 1 for a, b in zip(tries, tries[1:], strict=False))
    assert tries[-1] < RETRY_MAX_S + 60


def test_when_even_the_smallest_size_is_too_slow_it_says_so():
    controller = BudgetController(LADDER, 0, fps=30, auto=True)
    run(controller, 1.0 / pixels(LADDER[-1]), 400)  # 1 s at the smallest size
    assert controller.index == len(LADDER) - 1
    note = controller.note()
    assert note.startswith("cannot keep 30 fps") and "dropped" in note and "at most 0.8 fps" in note
    ntsc = BudgetController(LADDER, 0, fps=29.966484852467634, auto=True)  # a camera's NTSC rate, rounded
    run(ntsc, 1.0 / pixels(LADDER[-1]), 400)
    assert ntsc.note().startswith("cannot keep 29.97 fps")


def test_a_fixed_size_never_moves_but_says_whether_it_holds():
    controller = BudgetController([(640, 480)], 0, fps=10, auto=False)
    assert run(controller, 1.4 / pixels((640, 480)), 100) == []
    note = controller.note()
    assert note.startswith("640×480 as asked cannot keep 10 fps") and "93 % of frames" in note
    held = BudgetController([(64, 48)], 0, fps=10, auto=False)
    run(held, 0.03 / pixels((64, 48)), 100)
    assert held.note().startswith("learning at 64×48 as asked, keeping 10 fps")


def test_bad_start():
    with pytest.raises(ValueError):
        BudgetController(LADDER, len(LADDER), fps=10, auto=True)


def test_the_part_that_does_not_grow_with_the_size_is_not_expected_to_shrink():
    controller = BudgetController(LADDER, 0, fps=10, auto=True)
    fixed, per_pixel = 0.05, 0.07 / pixels(LADDER[0])  # 50 ms of pictures + 70 ms of steps at the largest size
    moves = []
    for _ in range(400):
        step = per_pixel * pixels(controller.size)
        move = controller.observe(fixed + step, step)
        if move is not None:
            moves.append(move)
    fits = [i for i, size in enumerate(LADDER) if fixed + per_pixel * pixels(size) <= TARGET * 0.1]
    assert moves[0] == fits[0] and controller.index == fits[0]  # straight there: no step-by-step descent


@pytest.mark.parametrize(
    "start, cold", [(len(LADDER) - 1, 1.0), (0, 3.0)], ids=["cached-smallest", "slow-first-window"]
)
def test_a_step_with_a_fixed_overhead_settles_at_the_largest_size_that_holds(start, cold):
    """A small net's step is largely per-op overhead (not proportional to the pixels). Started at the smallest size
    (what a cache remembered) or at the largest with a first window slowed by the start, the stream climbs to the
    largest size that holds, never choosing one that drops frames (work over ΔS)."""
    clock = Clock()
    controller = BudgetController(LADDER, start, fps=10, auto=True, clock=clock)
    fixed, overhead, per_pixel = 0.009, 0.040, 0.060 / pixels(LADDER[0])
    visited = []
    for frame in range(600):
        clock.now = frame * 0.1
        step = (overhead + per_pixel * pixels(controller.size)) * (cold if frame < 20 else 1.0)
        visited.append(controller.size)
        controller.observe(fixed + step, step)
    holds = [size for size in LADDER if fixed + overhead + per_pixel * pixels(size) <= TARGET * 0.1]
    assert controller.size == holds[0] and controller.settled
    chosen = visited[next(i for i, size in enumerate(visited) if size != LADDER[start]) :]
    assert all(fixed + overhead + per_pixel * pixels(size) < 0.1 for size in chosen)


@pytest.mark.parametrize("work_s", [0.077, 0.030, 0.020], ids=["too-slow-everywhere", "tight-everywhere",
                                                          "holds-everywhere"])  # fmt: skip
def test_a_flat_cost_learns_at_the_largest_size(work_s):
    """On a GPU a small net's step costs about the same at every size: a smaller size is no cheaper, so the stream
    learns at the largest (at the picture's own size), and says plainly when no size holds."""
    clock = Clock()
    ladder = learning_ladder((640, 480), 640)
    controller = BudgetController(ladder, 0, fps=30, auto=True, clock=clock)
    visited = set()
    for frame in range(30 * 60):
        clock.now = frame / 30
        controller.observe(work_s * (1 + 0.02 * (frame % 3 - 1)))  # noisy, never growing with the size
        visited.add(controller.index)
    assert controller.size == (640, 480)
    if work_s > TARGET / 30:
        assert len(visited) <= 3, "wandered down the ladder looking for a cheaper size"
        note = controller.note()
        assert note.startswith("cannot keep 30 fps: even at 640×480")
        if work_s > 1 / 30:  # frames are lost
            assert "% of frames are dropped" in note and "at most 10.8 fps" in note
        else:  # none lost, but no headroom
            assert "over the 85 % a stream may take" in note and "at most 27.7 fps" in note, note
    else:
        assert visited == {0} and controller.settled


@pytest.mark.parametrize("work_s", [0.029, 0.031], ids=["over-the-target", "over-the-budget"])
def test_a_host_bound_gpu_stream_keeps_its_size(work_s):
    """On a GPU the step runs beside the host's work, so what a smaller size saves is only the host's wait for the
    step (``FrameLoop`` passes that, 1 ms here): a frame's work over the target at 640x480 stays there, where the
    step's device time (12 ms) counted as host work predicted a smaller size holds and the stream moved for nothing."""
    clock = Clock()
    ladder = learning_ladder((640, 480), 640)
    controller = BudgetController(ladder, 0, fps=30, auto=True, clock=clock)
    moves = []
    for frame in range(30 * 60):
        clock.now = frame / 30
        noise = 1 + 0.02 * (frame * 7 % 5 - 2)
        moves.append(controller.observe(work_s * noise, 0.001 * noise))
    assert set(moves) == {None} and controller.size == (640, 480)
    assert controller.note().startswith("cannot keep 30 fps: even at 640×480")


def test_a_source_slower_than_its_rate_gives_each_frame_its_own_pace():
    """A file that says 15 fps but sends a frame every 0.44 s: a step of 0.1 s at the largest size is far over the
    rate said and well within the pace the source keeps, which the worker measures (``SourcePace``)."""
    cost = 0.1 / pixels(LADDER[0])
    said = BudgetController(LADDER, 0, fps=15, auto=True)
    run(said, cost, 100)
    assert said.index > 0
    paced = BudgetController(LADDER, 0, fps=15, auto=True)
    paced.pace(0.44)
    assert run(paced, cost, 100) == [] and paced.settled and paced.source_slower
    assert paced.note().startswith("learning at 160×120 to keep 2.273 fps (a frame's work takes 100 ms of 440 ms)")
    assert paced.note().endswith("; the source sends that, though it says 15 fps")
    paced.pace(0.46)  # within the source's jitter: ΔS and the note stay
    assert paced.ds == 0.44
    paced.pace(1 / 30)  # never shorter than the rate said
    assert paced.ds == 1 / 15 and not paced.source_slower


def _affine_step(size: tuple[int, int]) -> float:
    """A CPU step as measured on 2 cores: largely per-op overhead, the rest growing with the pixels (160x120: 95 ms)."""
    return 0.040 + 0.055 * pixels(size) / pixels(LADDER[0])


def _stream(load, seconds: float, start: int = 0) -> tuple[BudgetController, list[tuple[int, int]]]:
    """A stream at 10 fps whose every step is slowed by ``load(t)`` (another stream sharing the cores); the sizes it
    learned at, frame by frame."""
    clock = Clock()
    controller = BudgetController(LADDER, start, fps=10, auto=True, clock=clock)
    sizes = []
    while clock.now < seconds:
        step = load(clock.now) * _affine_step(controller.size)
        controller.observe(0.004 + step, step)
        sizes.append(controller.size)
        clock.now += max(0.1, 0.004 + step)
    return controller, sizes


def test_a_burst_at_the_smallest_size_does_not_send_the_stream_back_to_the_largest():
    """Four seconds of another stream's start, four times as slow, while the stream learned at a small size: that size
    measured dearer than the largest one had been, the fit ran downhill, and the stream went back to the largest and
    stayed there, dropping a third of its frames, for as long as it ran."""
    holds = [size for size in LADDER if 0.004 + _affine_step(size) <= TARGET * 0.1]
    controller, sizes = _stream(lambda t: 4.0 if 10 <= t < 14 else 1.0, seconds=120)
    assert controller.size in holds and controller.settled, controller.note()
    after = sizes[len(sizes) // 2 :]
    assert all(0.004 + _affine_step(size) <= 0.1 for size in after), "dropping frames long after the burst"


def test_a_size_measured_in_a_burst_is_tried_again_once_that_window_is_old():
    """The other direction: the size a stream started at (112x88), measured four times as slow in a burst, looked
    too dear to grow back to for good, and the stream stayed below it (96x72)."""
    holds = [size for size in LADDER if 0.004 + _affine_step(size) <= TARGET * 0.1]
    controller, _ = _stream(lambda t: 4.0 if t < 6 else 1.0, seconds=STALE_S + RETRY_MAX_S + 60, start=3)
    assert controller.size == holds[0] and controller.settled, controller.note()


def test_a_stream_far_over_its_budget_decides_after_a_window_of_its_own_time():
    """A 640x480 camera at 30 fps taking 300 ms a frame at its first size: a window counted in frames at the stream's
    rate (60) took 18 s of that stream's time, its frames meanwhile dropped nine in ten; a window of its own time
    decides after about 2 s."""
    controller = BudgetController(LADDER, 0, fps=30, auto=True)
    per_pixel, spent = 0.3 / pixels(LADDER[0]), 0.0
    while controller.observe(per_pixel * pixels(controller.size)) is None:
        spent += 0.3
    assert spent <= WARMUP_FRAMES * 0.3 + WINDOW_S, spent
    assert controller.size != LADDER[0]
