"""``bench.camera_flow``: real pictures under a known camera motion, with their exact flow."""

import numpy as np
import pytest
import torch
from clip_support import picture, run_clip_bench

from bench import camera_flow
from models.flow_loss import warp
from models.pretrain import as_input


@pytest.mark.parametrize("motion", [m for m in camera_flow.MOTIONS if m.shutter == 0 and not m.faint])
def test_the_second_picture_warped_back_by_the_exact_flow_is_the_first(motion):
    pair, flow, inside = camera_flow.camera_pair(picture(), motion, np.random.default_rng(1))
    assert pair.shape == (2, 120, 160, 3) and flow.shape == (120, 160, 2) and inside.any()
    x = as_input(pair[None])
    back = warp(x[:, 3:], torch.from_numpy(flow).permute(2, 0, 1)[None])[0].permute(1, 2, 0).numpy()
    residual = np.abs(back - x[0, :3].permute(1, 2, 0).numpy()).mean(-1)[inside]
    still = np.abs(pair[1].astype(float) - pair[0].astype(float)).mean(-1)[inside] / 255
    assert residual.mean() < 0.01 and (motion.shift < 1 or residual.mean() < 0.2 * still.mean()), motion.name


def test_a_pan_moves_every_pixel_by_its_length_and_keeps_only_matches_in_the_picture():
    motion = camera_flow.CameraMotion("pan", shift=10.0)
    _, flow, inside = camera_flow.camera_pair(picture(), motion, np.random.default_rng(2))
    np.testing.assert_allclose(np.linalg.norm(flow, axis=-1), 10.0, rtol=1e-5)
    assert 0.75 < inside.mean() < 0.95


def test_writes_every_motion_and_method(tmp_path):
    data = run_clip_bench(camera_flow.main, tmp_path, "camera-flow")
    assert set(data["epe"]) == {m.name for m in camera_flow.MOTIONS}
    pan = data["epe"]["pan 5 px"]
    assert set(pan) == {m + a for m in camera_flow.METHODS for a in ("", camera_flow.ALL_PIXELS)}
    assert pan["zero_flow"] == pytest.approx(5.0) and pan[f"zero_flow{camera_flow.ALL_PIXELS}"] == pytest.approx(5.0)
    assert pan["learned"] < 1.0 and pan[f"learned{camera_flow.ALL_PIXELS}"] < 1.0  # the net follows the pan
    assert (tmp_path / "camera-flow-sheet.png").stat().st_size > 10_000


def test_skips_without_clips(tmp_path, capsys):
    assert camera_flow.main(["--video", str(tmp_path / "none.mp4"), "--out", str(tmp_path)]) == 0
    assert "skipped" in capsys.readouterr().out and not list(tmp_path.iterdir())
