"""The motion cap: a learning size where a stream's fast motion would outrun the net's search is off limits once two
frames in a row show it (not for one frame's spike, nor for a pair that spans skipped frames), never below the size the
nets were made for, and back only after a calm; the budget controller moves under it and back to where it was."""

from __future__ import annotations

import numpy as np
import pytest

from server.stream.learner.budget import BudgetController
from server.stream.learner.reach import CALM_S, GROW_SHARE, REACH_PX, MotionCap, speed
from server.stream.sizing import learning_ladder, made_for_side

LADDER = learning_ladder((640, 480), 640)  # 640x480 down to 64x48 in steps of 16 on the long side
FLOOR = made_for_side(640, 480)  # 160: 160x120, the size the nets were made for


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def moving(size: tuple[int, int], px: float, share: float = 0.05) -> np.ndarray:
    """A flow at ``size`` where ``share`` of the pixels (a band) move ``px`` to the right and the rest stand still."""
    w, h = size
    flow = np.zeros((h, w, 2), np.float32)
    flow[: max(1, round(share * h)), :, 0] = px
    return flow


def side(index: int) -> int:
    return max(LADDER[index])


def test_the_speed_is_the_fast_pixels_in_long_sides_per_frame_at_every_size():
    assert speed(moving((640, 480), 40.0)) == pytest.approx(40 / 640)
    assert speed(moving((160, 120), 10.0)) == pytest.approx(10 / 160)
    assert speed(moving((640, 480), 40.0, share=0.005)) < 1 / 640  # under 1 % of the pixels: not the motion


def test_fast_motion_caps_the_size_on_its_second_frame_where_the_faster_of_the_two_stays_within_reach():
    cap = MotionCap(LADDER, FLOOR, Clock())
    assert cap.observe(moving(LADDER[0], 2.0)) == 0  # slow: the picture's own size
    assert cap.observe(moving(LADDER[0], 30.0)) == 0  # one frame: a missed cut, a flash, or the first of a fast hand
    top = cap.observe(moving(LADDER[0], 40.0))  # a hand crossing 1/16 of the picture a frame, still
    assert side(top) * 40 / 640 <= REACH_PX < side(top - 1) * 40 / 640


def test_a_single_fast_frame_moves_nothing():
    cap = MotionCap(LADDER, FLOOR, Clock())
    for px in (2.0, 71.0, 2.0, 2.0, 71.0, 1.5):  # box.mp4's loop seam, twice: 71 px at 640x480 for one frame
        assert cap.observe(moving(LADDER[0], px)) == 0


def test_a_pair_that_spans_skipped_frames_counts_its_motion_per_frame():
    """Frames skipped while a rebuild ran make the next pair span several; its motion a frame is what the cap needs
    (2.4 px a frame at 640 read over 8 frames is 19 px, beyond reach, yet slow)."""
    cap = MotionCap(LADDER, FLOOR, Clock())
    for _ in range(3):
        assert cap.observe(moving(LADDER[0], 19.0), frames=8) == 0
    assert cap.observe(moving(LADDER[0], 19.0), frames=1) == 0  # the frame after the gap: one frame, not yet
    assert side(cap.observe(moving(LADDER[0], 19.0), frames=1)) == 400  # 19 px a frame twice: 12 px at 400


def test_never_below_the_size_the_nets_were_made_for():
    cap = MotionCap(LADDER, FLOOR, Clock())
    cap.observe(moving(LADDER[0], 200.0))
    assert side(cap.observe(moving(LADDER[0], 200.0))) == FLOOR
    small = learning_ladder((160, 120), 160)  # the CPU's ladder starts there: never capped
    small_cap = MotionCap(small, FLOOR, Clock())
    assert [small_cap.observe(moving(small[0], 60.0)) for _ in range(2)] == [0, 0]


def test_a_wide_pictures_floor_has_the_pixels_the_nets_were_made_for():
    wide = learning_ladder((640, 272), 640)  # 2.35:1: the floor is a long side of 216 (216x88), not 160 (160x72)
    cap = MotionCap(wide, made_for_side(640, 272), Clock())
    cap.observe(moving(wide[0], 200.0))
    assert wide[cap.observe(moving(wide[0], 200.0))] == (224, 96)  # the ladder's smallest size that long
    cpu = learning_ladder((216, 88), 216)  # the CPU's ladder for it starts at its floor: never capped
    cpu_cap = MotionCap(cpu, made_for_side(640, 272), Clock())
    assert [cpu_cap.observe(moving(cpu[0], 60.0)) for _ in range(2)] == [0, 0]


def test_back_up_only_after_a_calm_and_only_as_far_as_the_recent_motion_allows():
    clock = Clock()
    cap = MotionCap(LADDER, FLOOR, clock)
    cap.observe(moving(LADDER[0], 200.0))
    capped = cap.observe(moving(LADDER[0], 200.0))
    floor = LADDER[capped]
    for _ in range(int(CALM_S * 10) - 1):  # calm but not yet for CALM_S
        clock.now += 0.1
        assert cap.observe(moving(floor, 0.5)) == capped
    clock.now += 0.2
    assert cap.observe(moving(floor, 0.5)) == 0  # 2 px at 640: within GROW_SHARE of the reach
    clock.now += 0.1
    cap.observe(moving(LADDER[0], 30.0))
    capped = cap.observe(moving(LADDER[0], 30.0))
    assert side(capped) == 256
    pace = 10 / 640  # then slower, but still too fast for the picture's own size to take with room to spare
    for _ in range(int(CALM_S * 10) + 5):
        clock.now += 0.1
        top = cap.observe(moving(LADDER[capped], pace * side(capped)))
    assert side(capped) < side(top) < 640
    assert pace * side(top) <= GROW_SHARE * REACH_PX < pace * side(top - 1)


def test_the_budget_moves_under_a_cap_at_once_and_back_to_its_size_when_it_lifts():
    controller = BudgetController(LADDER, 2, fps=30, auto=True)
    assert controller.limit(0) is None and not controller.capped
    assert controller.limit(20) == 20 and controller.size == LADDER[20] and controller.capped
    assert "motion is this fast" in controller.note()
    assert controller.limit(10) == 10 and controller.capped  # partly lifted: as far as allowed
    assert controller.limit(0) == 2 and not controller.capped  # lifted: where the budget had it
    fixed = BudgetController([(640, 480)], 0, fps=30, auto=False)
    assert fixed.limit(5) is None and fixed.size == (640, 480)  # a size asked for is kept


def test_the_budget_does_not_grow_above_a_cap():
    controller = BudgetController(LADDER, 0, fps=10, auto=True)
    controller.limit(12)
    for _ in range(400):  # 1 ms a frame: room for any size
        move = controller.observe(0.001)
        assert move is None or move >= 12
    assert controller.index == 12
