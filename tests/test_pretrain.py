"""The camera-like clips, the offline pretraining that learns from them and the weights it ships."""

import json

import numpy as np
import pytest
import torch

from models import pretrain, scenes
from models.flow_metrics import FAST_MOTION
from models.flow_nets import FLOW_NETS, WEIGHTS_DIR, PairFeatures, build_flow_net
from models.online import frame_pair

torch.set_num_threads(1)


def _epe(flow: torch.Tensor, gt: np.ndarray) -> float:
    return float(np.linalg.norm(flow[0].permute(1, 2, 0).numpy() - gt, axis=-1).mean())


def test_camera_clip_has_its_exact_flow():
    clip = scenes.camera_clip(np.random.default_rng(3), 64, 48, 4)
    assert clip.frames.shape == (4, 48, 64, 3) and clip.frames.dtype == np.uint8
    assert clip.flow.shape == (3, 48, 64, 2) and np.isfinite(clip.flow).all()
    with pytest.raises(ValueError, match="even sides"):
        scenes.camera_clip(np.random.default_rng(0), 63, 48, 4)


def test_a_clip_recorded_larger_shows_the_same_scene_with_the_same_flow():
    """Recording at twice the size moves only where noise and H.264 act, not what the scene does."""
    small, large = (scenes.camera_clip(np.random.default_rng(5), 64, 48, 3, recorded=r) for r in (1, 2))
    assert large.frames.shape == small.frames.shape and large.frames.dtype == np.uint8
    np.testing.assert_array_equal(large.flow, small.flow)
    difference = np.abs(large.frames.astype(float) - small.frames.astype(float)).mean()
    assert 0 < difference < 12, difference
    with pytest.raises(ValueError, match="recorded"):
        scenes.camera_clip(np.random.default_rng(0), 64, 48, 3, recorded=scenes.OVERSAMPLE + 1)


def _sliding_layer(texture: np.ndarray, shift: tuple[float, float], frames: int) -> scenes._Layer:
    """A layer whose texture moves by ``shift`` canvas pixels each frame (instants -1 .. frames)."""
    placements = [scenes._affine(1.0, 0.0, shift[0] * t, shift[1] * t) for t in range(-1, frames + 1)]
    return scenes._Layer(texture, placements)


def test_a_translating_layer_has_its_translation_as_flow_and_blur_only_where_it_moves():
    rng = np.random.default_rng(0)
    background = np.dstack([rng.uniform(0, 255, (40, 48, 3)), np.ones((40, 48))]).astype(np.float32)
    mover = np.dstack([np.full((8, 8, 3), 200.0), np.ones((8, 8))]).astype(np.float32)
    layers = [_sliding_layer(background, (0.0, 0.0), 3), _sliding_layer(mover, (6.0, 0.0), 3)]
    layers[1].placements = [scenes._affine(1.0, 0.0, 4.0, 10.0) @ p for p in layers[1].placements]
    sharp, flow = scenes._render(layers, 3, (40, 48))
    blurred, same_flow = scenes._render(layers, 3, (40, 48), shutter=1.0)
    np.testing.assert_array_equal(flow, same_flow)  # the flow is between the frames' instants, blurred or not
    np.testing.assert_allclose(flow[0, 12:16, 6:10], np.broadcast_to([6.0, 0.0], (4, 4, 2)), atol=1e-4)
    assert np.abs(flow[0, 30:, :]).max() == 0  # the background stands still
    np.testing.assert_allclose(blurred[:, 30:], sharp[:, 30:], rtol=1e-5)  # blur only where something moves
    assert np.abs(blurred[:, 8:20] - sharp[:, 8:20]).max() > 50  # the mover is smeared over its path
    assert scenes._subframes(layers, 1, 1.0, (40, 48)) == 6  # a canvas pixel apart: 6 px in one frame interval


def test_clips_have_fast_motion_as_real_footage_does():
    rng, textures = np.random.default_rng(5), scenes.Textures()
    fastest = [np.linalg.norm(scenes.camera_clip(rng, 80, 60, 3, textures).flow, axis=-1).max() * 2 for _ in range(12)]
    assert max(fastest) > 2 * scenes.SLOW_SPEED[1]  # at 160x120, well beyond a small search at 1/4 resolution
    assert min(fastest) < scenes.SLOW_SPEED[1]


def test_shipped_weights_match_the_fast_nets_layout_and_say_how_they_were_made():
    shipped = torch.load(WEIGHTS_DIR / "fast.pt", map_location="cpu", weights_only=True)
    assert shipped.keys() == FLOW_NETS["fast"]().state_dict().keys()
    made = json.loads((WEIGHTS_DIR / "fast.json").read_text())
    assert made["net"] == "fast" and made["command"].startswith("python -m models.pretrain")
    assert made["held_out_epe"] < made["held_out_zero_flow_epe"]


def test_pretrained_fast_net_beats_zero_flow_from_the_first_pair_of_an_unseen_clip():
    rng = np.random.default_rng(987_654)  # not a seed the shipped weights were trained on
    net = build_flow_net("fast", init="pretrained").eval()
    wins = 0
    clips = [scenes.camera_clip(rng, 160, 120, 2) for _ in range(6)]
    with torch.no_grad():
        for clip in clips:
            gt = clip.flow[0]
            learned = _epe(net(frame_pair(clip.frames[0], clip.frames[1])), gt)
            wins += learned < np.linalg.norm(gt, axis=-1).mean()
    assert wins >= 5, f"pretrained beat zero flow on {wins} of {len(clips)} first pairs"


def test_level_flows_groups_refinements_by_pyramid_level():
    net = build_flow_net("fast", init="scratch")
    with torch.no_grad():
        levels = pretrain.level_flows(net, torch.rand(1, 6, 32, 32))
    assert len(levels) == sum(isinstance(layer, PairFeatures) for layer in net) and all(levels)
    assert pretrain.level_weights(4) == (0.125, 0.25, 0.5, 1.0)
    gt = torch.zeros(1, 2, 32, 32)
    weighted = zip(pretrain.level_weights(len(levels)), levels, strict=True)
    expected = sum(w * sum(pretrain.epe(f, gt) for f in fs) / len(fs) for w, fs in weighted)
    assert float(pretrain.multiscale_loss(levels, gt)) == pytest.approx(float(expected))


def test_pretraining_writes_loadable_weights_and_how_they_were_made(tmp_path, monkeypatch):
    monkeypatch.setattr(pretrain, "CACHE_DIR", tmp_path / "cache")
    out = tmp_path / "weights"
    args = ["--clips", "4", "--holdout", "1", "--frames", "3", "--width", "32", "--height", "32", "--steps", "2",
            "--batch", "2", "--log-every", "1", "--threads", "1", "--out", str(out)]  # fmt: skip
    assert pretrain.main(args) == 0
    made = json.loads((out / "fast.json").read_text())
    assert made["training"]["steps"] == 2 and len(made["log"]) == 2 and made["data"]["held_out_pairs"] == 2
    assert made["held_out_fast_epe"] >= 0 and made["fast_motion_px"] == FAST_MOTION
    state = torch.load(out / "fast.pt", weights_only=True)
    FLOW_NETS["fast"]().load_state_dict(state)
    assert list((tmp_path / "cache").glob("scenes-4x3-32x32-*.npz"))  # a rerun reuses the data


def test_held_out_scores_pool_the_fast_pixels_apart():
    pairs = np.zeros((2, 2, 8, 8, 3), np.uint8)
    flows = np.zeros((2, 8, 8, 2), np.float16)
    flows[0, :4] = (6.0, 0.0)  # half of the first pair moves fast
    flows[1] = (1.0, 0.0)  # the second pair moves slowly everywhere
    scores = pretrain.held_out_scores(lambda x: torch.zeros(len(x), 2, 8, 8), pairs, flows)
    assert scores["epe"] == scores["zero_flow_epe"] == pytest.approx((3.0 + 1.0) / 2)
    assert scores["fast_epe"] == scores["zero_flow_fast_epe"] == pytest.approx(6.0)


def test_a_warm_restart_starts_from_the_earlier_weights_and_keeps_their_record(tmp_path, monkeypatch):
    monkeypatch.setattr(pretrain, "CACHE_DIR", tmp_path / "cache")
    common = ["--clips", "4", "--holdout", "1", "--frames", "3", "--width", "32", "--height", "32", "--batch", "2",
              "--threads", "1"]  # fmt: skip
    assert pretrain.main([*common, "--steps", "3", "--out", str(tmp_path / "first")]) == 0
    assert pretrain.main([*common, "--steps", "1", "--init", str(tmp_path / "first" / "fast.pt"),
                          "--out", str(tmp_path / "second")]) == 0  # fmt: skip
    first = json.loads((tmp_path / "first" / "fast.json").read_text())
    second = json.loads((tmp_path / "second" / "fast.json").read_text())
    assert second["start_epe"] == pytest.approx(first["held_out_epe"], abs=2e-4)  # same held-out clips, same weights
    assert second["warm_start"] == first
