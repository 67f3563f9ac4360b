"""The rolling-shutter bench's pairs (``bench.rolling_shutter``): their flow is exact, rows read in turn included."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
from clip_support import picture, run_clip_bench

from bench import rolling_shutter
from bench.rolling_shutter import HandMotion, hand_pair


def residual(pair: np.ndarray, flow: np.ndarray, inside: np.ndarray) -> float:
    """Mean grey-level difference of the first picture and the second warped back by ``flow``, where it lands inside."""
    h, w = flow.shape[:2]
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float32)
    back = cv2.remap(pair[1].astype(np.float32), xs + flow[..., 0], ys + flow[..., 1], cv2.INTER_LINEAR)
    return float(np.abs(back - pair[0].astype(np.float32))[inside].mean())


def test_a_global_shutter_s_flow_is_the_pan_s_first_speed_everywhere():
    pair, flow, inside = hand_pair(picture(), HandMotion("global", 5.0, 3.0), np.random.default_rng(1))
    assert np.linalg.norm(flow, axis=-1) == pytest.approx(5.0, abs=1e-4)
    assert residual(pair, flow, inside) < 2.0


def test_a_rolling_shutter_s_flow_changes_down_the_picture_and_explains_the_pair():
    """Rows read over 0.8 of the interval while the speed changes by 3 px: the flow differs by over a pixel from the
    top row to the bottom, is the same along a row, and explains the pair as well as a global shutter's does, where
    its mean (one translation) leaves several times more."""
    pair, flow, inside = hand_pair(picture(), HandMotion("rolling", 5.0, 3.0, readout=0.8), np.random.default_rng(1))
    assert np.linalg.norm(flow[-1].mean(0) - flow[0].mean(0)) > 1.0
    assert flow.std(axis=1).max() < 0.05
    assert residual(pair, flow, inside) < 2.0
    translation = np.broadcast_to(flow.mean((0, 1)), flow.shape).copy()
    assert residual(pair, translation, inside) > 3 * residual(pair, flow, inside)


def test_writes_every_motion_and_method(tmp_path):
    data = run_clip_bench(rolling_shutter.main, tmp_path, "rolling-shutter")
    assert set(data["epe"]) == {m.name for m in rolling_shutter.MOTIONS}
    assert all(set(epe) == set(rolling_shutter.METHODS) for epe in data["epe"].values())
    assert data["epe"]["pan 5 px, speed changing 3 px, global shutter"]["zero_flow"] == pytest.approx(5.0)


def test_without_a_clip_it_says_it_skipped(capsys, tmp_path):
    assert rolling_shutter.main(["--video", str(tmp_path / "none.mp4"), "--out", str(tmp_path)]) == 0
    assert "skipped" in capsys.readouterr().out and not list(tmp_path.iterdir())
