"""``bench.scene_flow``: which pixels a fast mover covers, and the report on a couple of generated clips."""

import json

import numpy as np

from bench import scene_flow


def square_moving_right(step: int) -> np.ndarray:
    """Exact flow of a 10 px square at columns 10-19 moving ``step`` px right over still ground, 40x40."""
    flow = np.zeros((40, 40, 2), np.float32)
    flow[10:20, 10:20, 0] = step
    return flow


def test_a_fast_mover_covers_the_ground_ahead_of_it_not_behind():
    kinds = scene_flow.kinds_of_pixel(square_moving_right(6))
    covered = kinds["covered"]
    assert covered[10:20, 20:26].all()  # the 6 px ahead of it, on its rows
    assert not covered[:, :10].any() and not covered[:, 27:].any()  # behind it; beyond its step (and a pixel)
    assert not covered[:9].any() and not covered[21:].any()  # above and below, beyond a pixel's rounding
    assert not (covered & kinds["fast"]).any()  # the mover itself is not ground
    assert (kinds["visible"] | covered | kinds["fast"])[2:28, 2:28].all()  # within 8 px of it: one kind or the other
    assert not kinds["near_fast"][35:].any()  # far from it: neither
    assert kinds["fast"].sum() == 100 and kinds["moving"].sum() == 100


def test_slow_motion_has_no_surroundings_to_score():
    kinds = scene_flow.kinds_of_pixel(square_moving_right(2))  # below FAST_MOTION
    assert not kinds["fast"].any() and not kinds["near_fast"].any() and kinds["moving"].sum() == 100


def test_writes_every_method_and_kind(tmp_path):
    assert scene_flow.main(["--clips", "2", "--threads", "1", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "scene-flow.json").read_text())
    assert set(data["epe"]) == set(scene_flow.METHODS) and data["pixels"]["all"] == 2 * 5 * 160 * 120
    zero = data["epe"]["zero_flow"]
    assert zero["fast"] > zero["moving"] > zero["all"] > 0  # zero flow's error is the true speed
    assert "learned / better of Farneback and DIS-fast" in (tmp_path / "scene-flow.md").read_text()


def test_surveillance_scenes_hold_small_movers_before_a_static_camera(tmp_path):
    args = ["--clips", "2", "--threads", "1", "--scene", "surveillance", "--out", str(tmp_path)]
    assert scene_flow.main(args) == 0
    data = json.loads((tmp_path / "scene-flow-surveillance.json").read_text())
    assert data["scene"] == "surveillance"
    moving_share = data["pixels"]["moving"] / data["pixels"]["all"]
    assert 0 < moving_share < 0.2 and data["pixels"]["fast"] == 0  # a few small, slow movers; the rest is still


def test_clips_recorded_at_twice_the_size_are_a_results_file_of_their_own(tmp_path):
    args = ["--clips", "1", "--threads", "1", "--scene", "surveillance", "--recorded", "2", "--out", str(tmp_path)]
    assert scene_flow.main(args) == 0
    data = json.loads((tmp_path / "scene-flow-surveillance-recorded2.json").read_text())
    assert data["recorded"] == 2 and data["pixels"]["all"] == 5 * 160 * 120
    assert "H.264 at 320x240, then downsized" in (tmp_path / "scene-flow-surveillance-recorded2.md").read_text()
    assert not (tmp_path / "scene-flow-surveillance.json").exists()
