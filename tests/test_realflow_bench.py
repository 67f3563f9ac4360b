"""``bench.realflow`` end to end on a short generated clip: the files, their structure and what must hold whatever
the learners learn (the numbers themselves live in bench/results/)."""

import json

import numpy as np
import pytest
import torch
from PIL import Image

from bench import realflow, realflow_report, realflow_scores
from models.flow_nets import build_flow_net
from models.streams import generate, write_mp4
from testing.media import turned_copy
from testing.sources import NO_FFMPEG


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    path = tmp_path_factory.mktemp("clips") / "moving.mp4"
    write_mp4(generate(size=64, frames=12, seed=3).frames[:, :48], path, fps=15)  # 64x48, 12 frames
    return path


def run_realflow(argv: list[str]) -> None:
    """``bench.realflow`` run to its end, torch's thread count restored after (``--threads`` sets it)."""
    threads = torch.get_num_threads()
    try:
        assert realflow.main(argv) == 0
    finally:
        torch.set_num_threads(threads)


def test_writes_scored_results_for_every_method(clip, tmp_path):
    # One intra-op thread: on a loaded machine two OpenMP threads made a step ~9x slower (measured).
    argv = ["--video", str(clip), "--size", "64x48", "--stages", "1,2", "--threads", "1", "--out", str(tmp_path)]
    run_realflow(argv)
    stem = tmp_path / "realflow-moving-64x48"
    result = json.loads(stem.with_suffix(".json").read_text())
    assert result["command"] == "python -m bench.realflow " + " ".join(argv)
    assert len(result["load_average_before"]) == len(result["load_average_after"]) == 3
    assert result["clip"]["decoded"] == result["clip"]["kept"] == 12 and result["clip"]["pairs"] == 11
    assert result["clip"]["fps"] == 15 and result["clip"]["size"] == [64, 48]
    assert result["clip"]["backwards_timestamps"] == 0 and result["unmatched_pairs"] == []

    methods = result["methods"]
    scores = ("epe_all", "epe_moving", "epe_fast", "epe_moving_consistent", "epe_fast_consistent", "f1_moving", "photo")
    counts = ("pairs", "unmatched_pairs", "moving_pixels", "fast_pixels")
    counts += ("consistent_moving_pixels", "consistent_fast_pixels")
    learners = [f"{init}/{d}" for init in ("pretrained", "scratch") for d in ("sequential", "partime_d2")]
    assert list(methods) == [*learners, realflow.AS_SHIPPED, "farneback", "dis_fast", "zero_flow"]
    for name, m in methods.items():
        assert m["scored_pairs"] == 11, name  # PARTIME's last pair comes out of the flush and is scored too
        assert [m[w]["pairs"] for w in ("first30", "first100", "all")] == [11, 11, 11], name
        assert set(m["all"]) == {*counts, *scores}, name
        assert m["all"]["consistent_moving_pixels"] <= m["all"]["moving_pixels"], name
    assert len(methods["scratch/partime_d2"]["balance"]) == 2 and methods["scratch/partime_d2"]["lr"] > 0
    assert result["losing_pairs"]["learner"] == "pretrained/sequential"  # the first learner's, said in the report
    assert "the EPE of pretrained/sequential summed over the moving pixels is" in stem.with_suffix(".md").read_text()

    # Zero flow's EPE is the pseudo-GT's mean speed, and it finds no moving pixel; DIS-fast scores something finite.
    zero = methods["zero_flow"]["all"]
    assert zero["epe_all"] == pytest.approx(result["pseudo_gt"]["mean_magnitude"], rel=1e-5)
    assert result["pseudo_gt"]["moving_fraction"] > 0 and zero["f1_moving"] == 0.0
    pixels = result["clip"]["pairs"] * 64 * 48  # how many pixels the window's moving-pixel EPE averages, said
    assert zero["moving_pixels"] == round(result["pseudo_gt"]["moving_fraction"] * pixels)
    dis = methods["dis_fast"]["all"]
    assert all(np.isfinite(dis[k]) for k in ("epe_all", "epe_moving", "f1_moving", "photo"))
    assert dis["epe_all"] < zero["epe_all"]

    # Each learner against the better classical method, per window; the fastest pair is on the sheet.
    for window in ("first30", "first100", "all"):
        ratios = result["versus_classical"][window]
        assert list(ratios) == learners
        better = min(methods["farneback"][window]["epe_all"], methods["dis_fast"][window]["epe_all"])
        assert ratios["scratch/sequential"]["epe_all"] == pytest.approx(
            methods["scratch/sequential"][window]["epe_all"] / better
        )
    assert result["fastest_pair"] in result["sheet_pairs"]

    md = stem.with_suffix(".md").read_text()
    assert f"`{result['command']}`" in md and "load average" in md
    assert md.count("| zero_flow |") == 3  # first 30, first 100, whole clip
    assert f"(11 pairs; {zero['moving_pixels']:,} moving pixels, {zero['fast_pixels']:,} fast; consistent: " in md
    # The generated clip's reference agrees with itself on most moving pixels; the pixels counted say how many.
    assert 0.5 < result["pseudo_gt"]["consistent_moving_fraction"] <= 1
    assert zero["consistent_moving_pixels"] == pytest.approx(
        result["pseudo_gt"]["consistent_moving_fraction"] * zero["moving_pixels"], abs=0.5
    )
    assert md.count("| scratch/partime_d2 |") == 9  # its rows, its ratios to the classical methods and the shipped net
    for png in (stem.with_suffix(".png"), tmp_path / "realflow-moving-64x48-sheet.png"):
        with Image.open(png) as image:
            assert image.size[0] > 400 and image.size[1] > 300


def test_a_clip_whose_frames_change_shape_is_refused_in_words(tmp_path, capsys):
    """Squashed into the first frame's shape, a turned part would be scored warped; the service turns its picture."""
    frames = generate(size=64, frames=8, seed=3).frames
    write_mp4(frames[:, :48], tmp_path / "a.ts", fps=15)  # 64x48
    write_mp4(frames[:, :, :48], tmp_path / "b.ts", fps=15)  # 48x64: turned
    joined = tmp_path / "turned.ts"
    joined.write_bytes((tmp_path / "a.ts").read_bytes() + (tmp_path / "b.ts").read_bytes())
    with pytest.raises(SystemExit):
        realflow.main(["--video", str(joined), "--size", "64x48", "--out", str(tmp_path)])
    assert "its frames change shape" in capsys.readouterr().err


def test_default_size_follows_the_aspect_ratio():
    assert realflow.working_size(640, 480) == (160, 120)
    assert realflow.working_size(320, 240) == (160, 120)
    assert realflow.working_size(480, 640) == (120, 160)
    assert realflow.working_size(1920, 1080) == (184, 104)  # the service's CPU size: about 160x120's pixels
    assert realflow.working_size(1920, 1080, 160) == (160, 88)
    assert realflow.parse_size("64x48") == (64, 48)
    for odd in ("66x48", "68x48"):  # not a multiple of 8: the fast net's coarsest level is 1/8
        with pytest.raises(ValueError):
            realflow.parse_size(odd)


@pytest.mark.skipif(NO_FFMPEG is not None, reason=str(NO_FFMPEG))
def test_a_portrait_phone_video_is_measured_upright(clip, tmp_path):
    turned = turned_copy(clip, tmp_path / "portrait.mp4", 90)  # 64x48 pictures that players show as 48x64
    probed = realflow.probe(turned)
    assert (probed["width"], probed["height"]) == (48, 64)
    loaded = realflow.load_clip(turned, 15, 48, 64)
    assert loaded.frames.shape[1:] == (64, 48, 3) and loaded.info["full_size"] == [48, 64]


def test_the_fastest_pair_is_the_one_with_the_fastest_pixels_not_the_largest_mean():
    flows = np.zeros((4, 10, 10, 2), np.float32)
    flows[1] += 1.0  # everything moves a little: the largest mean
    flows[2, :3, :4] = (6.0, 0.0)  # 12 % of the picture moves fast
    flows[3, 0, 0] = (50.0, 0.0)  # one wild vector
    assert realflow_report.fastest_pair(flows, np.zeros(4, bool)) == 2
    flows[3] = 9.0  # a scene cut: the reference's vectors are wild everywhere
    assert realflow_report.fastest_pair(flows, np.array([False, False, False, True])) == 2


def test_a_pair_without_correspondence_is_scored_for_no_method():
    frames = np.zeros((4, 8, 8, 3), np.uint8)
    gt = np.ones((3, 8, 8, 2), np.float32)
    consistent = np.ones((3, 8, 8), bool)
    consistent[1, 1:] = False  # the reference fails its own test on 7/8 of the second pair: a cut
    clip = realflow_scores.Clip(frames, gt, consistent, [0.0, 0.1, 0.2, 0.3], {})
    assert clip.unmatched.tolist() == [False, True, False]
    scores = realflow_scores.PairScores(clip, set())
    for t, error in enumerate((1.0, 50.0, 3.0)):
        scores.add(t, gt[t] + np.array([error, 0.0], np.float32))
    whole = scores.window(None)
    assert whole["pairs"] == 2 and whole["unmatched_pairs"] == 1
    assert whole["epe_all"] == pytest.approx(2.0) and whole["epe_moving"] == pytest.approx(2.0)


def test_the_pairs_a_learner_loses_most_on_are_listed_with_the_references_own_confidence():
    texture = np.random.default_rng(0).integers(0, 256, (8, 8, 3), dtype=np.uint8)
    frames = np.stack([np.roll(texture, (t, t), axis=(0, 1)) for t in range(6)])
    gt = np.ones((5, 8, 8, 2), np.float32)  # every pixel moves 1.4 px, as the frames do (but at the wrapped edge)
    consistent = np.ones((5, 8, 8), bool)
    consistent[3, :2] = False  # the reference fails its own test on a quarter of pair 3
    consistent[4, 1:] = False  # pair 4: a scene cut, scored for nobody
    clip = realflow_scores.Clip(frames, gt, consistent, [0.1 * t for t in range(6)], {})
    off = {"learned": (0.1, 0.2, 0.1, 3.0, 90.0), "farneback": (0.5, 0.1, 0.5, 1.0, 0.0), "dis_fast": (9, 9, 9, 9, 9)}
    scores = {name: realflow_scores.PairScores(clip, set()) for name in off}
    for name, errors in off.items():
        for t, error in enumerate(errors):
            scores[name].add(t, gt[t] + np.array([error, 0.0], np.float32))
    losing = realflow_report.losing_pairs(scores, "learned")
    assert losing["classical"] == "farneback"
    assert [r["pair"] for r in losing["pairs"]] == [3, 1]  # by how much it loses; never the cut, nor where it wins
    assert losing["pairs"][0]["consistent_share"] == pytest.approx(0.75) and losing["pairs"][0]["moving_pixels"] == 64
    assert losing["clip_difference"] == pytest.approx(64 * (3.4 - 2.1))
    table = "\n".join(realflow_report.losing_pairs_table(losing))
    assert "is 83 px above that of farneback" in table and "| 3 | 64 | 75 % | 192 | 64 | +128 |" in table
    photometric = losing["pairs"][0]["photometric"]  # the reference explains the pair, the others are 1 and 3 px off
    assert photometric["reference"] < 0.5 * min(photometric["classical"], photometric["learner"])
    assert f"{photometric['reference']:.3f} / {photometric['learner']:.3f} / {photometric['classical']:.3f} |" in table
    losing["pairs"] = []
    assert "above on no pair" in "\n".join(realflow_report.losing_pairs_table(losing))


def test_fast_and_consistent_pixels_are_scored_apart_and_a_window_without_them_has_no_score():
    frames = np.zeros((3, 8, 8, 3), np.uint8)
    gt = np.zeros((2, 8, 8, 2), np.float32)
    gt[1, :2] = (5.0, 0.0)  # 16 fast pixels in the second pair
    consistent = np.ones((2, 8, 8), bool)
    consistent[1, 0] = False  # the reference of 8 of them fails its forward-backward test
    scores = realflow_scores.PairScores(realflow_scores.Clip(frames, gt, consistent, [0.0, 0.1, 0.2], {}), set())
    flow = np.zeros((8, 8, 2), np.float32)
    flow[1, :] = (1.0, 0.0)  # 1 px of the 5 on the consistent row, none on the other
    for t in range(2):
        scores.add(t, flow)
    assert np.isnan(scores.window(1)["epe_fast"]) and np.isnan(scores.window(1)["epe_fast_consistent"])
    whole = scores.window(2)
    assert whole["epe_fast"] == pytest.approx(4.5) and whole["epe_moving"] == pytest.approx(4.5)
    assert whole["consistent_fast_pixels"] == 8 and whole["epe_fast_consistent"] == pytest.approx(4.0)


def test_sheet_pairs_start_early_and_spread():
    assert realflow_report.sheet_pairs(223) == [0, 10, 30, 100, 111, 222]
    assert realflow_report.sheet_pairs(67) == [0, 10, 30, 66]  # 33 is too close to 30
    assert realflow_report.sheet_pairs(3) == [0]


def test_a_saved_state_dict_initialises_the_learner(tmp_path):
    torch.manual_seed(5)
    saved = build_flow_net("fast", init="scratch").state_dict()
    torch.save(saved, tmp_path / "weights.pt")
    sample = torch.zeros(1, 6, 32, 32)
    for init, same in ((str(tmp_path / "weights.pt"), True), ("scratch", False)):
        with realflow.build_learner(realflow.initial_net(init, "fast", 0), init, sample, 1, 1e-3) as pipe:
            weights = pipe.module().state_dict()
        assert all(torch.equal(weights[k], v) for k, v in saved.items()) is same, init


def test_several_rates_are_compared_in_one_run(clip, tmp_path):
    argv = ["--video", str(clip), "--size", "64x48", "--stages", "1", "--init", "pretrained", "--lr", "1e-4,1e-5",
            "--threads", "1", "--out", str(tmp_path)]  # fmt: skip
    run_realflow(argv)
    methods = json.loads((tmp_path / "realflow-moving-64x48.json").read_text())["methods"]
    assert list(methods)[:2] == ["pretrained/sequential lr 0.0001", "pretrained/sequential lr 1e-05"]
    assert [m["lr"] for m in list(methods.values())[:2]] == [1e-4, 1e-5]


def test_rates_must_be_numbers_not_below_zero():
    assert realflow.parse_rates(None) == [None]
    assert realflow.parse_rates("1e-4,3e-5,0") == [1e-4, 3e-5, 0.0]  # 0: the weights stay frozen
    for bad in ("fast", "1e-4,-1", "-1e-4", ""):
        with pytest.raises(ValueError):
            realflow.parse_rates(bad)


def test_noise_is_added_to_what_the_methods_see_and_not_to_the_reference(clip, tmp_path):
    frames = np.full((3, 8, 8, 3), 128, np.uint8)
    still = realflow_scores.Clip(
        frames, np.zeros((2, 8, 8, 2), np.float32), np.ones((2, 8, 8), bool), [0.0, 0.1, 0.2], {}
    )
    noisy = realflow.with_sensor_noise(still, 4.0, seed=0)
    assert noisy.frames.dtype == np.uint8 and noisy.pseudo_gt is still.pseudo_gt
    assert 3.5 < float(noisy.frames.astype(float).std()) < 4.5
    assert np.array_equal(noisy.frames, realflow.with_sensor_noise(still, 4.0, seed=0).frames)

    argv = ["--video", str(clip), "--size", "64x48", "--stages", "1", "--init", "pretrained", "--noise", "4",
            "--threads", "1", "--out", str(tmp_path)]  # fmt: skip
    run_realflow(argv)
    result = json.loads((tmp_path / "realflow-moving-64x48-noise4.json").read_text())
    assert result["noise_levels"] == 4.0 and "with noise of 4 levels" in result["title"]
    with pytest.raises(SystemExit):
        realflow.main(["--video", str(clip), "--noise", "-1"])


def test_a_camera_shift_changes_what_the_methods_see_and_not_the_reference(clip, tmp_path):
    frames = np.random.default_rng(1).integers(0, 256, (3, 8, 8, 3), np.uint8)
    flow, consistent = np.ones((2, 8, 8, 2), np.float32), np.ones((2, 8, 8), bool)
    moving = realflow_scores.Clip(frames, flow, consistent, [0.0, 0.1, 0.2], {})
    for name in ("night", "blur"):
        shifted = realflow.with_camera_shift(moving, name, seed=0)
        assert shifted.frames.shape == frames.shape and shifted.frames.dtype == np.uint8
        assert not np.array_equal(shifted.frames, frames) and shifted.pseudo_gt is moving.pseudo_gt
        assert np.array_equal(shifted.frames, realflow.with_camera_shift(moving, name, seed=0).frames)
    assert realflow.with_camera_shift(moving, "night", 0).frames.mean() < frames.mean() / 2  # little light

    argv = ["--video", str(clip), "--size", "64x48", "--stages", "1", "--init", "pretrained", "--shift", "night",
            "--threads", "1", "--out", str(tmp_path)]  # fmt: skip
    run_realflow(argv)
    result = json.loads((tmp_path / "realflow-moving-64x48-night.json").read_text())
    assert result["camera_shift"] == "night" and "through the camera shift 'night'" in result["title"]
    shipped = result["methods"][realflow.AS_SHIPPED]  # the frozen net without the feed, beside the learner
    assert "balance" not in shipped and 0 < shipped["all"]["epe_all"] < float("inf")
    learner = result["methods"]["pretrained/sequential"]["all"]["epe_moving_consistent"]
    assert result["versus_as_shipped"]["all"]["pretrained/sequential"]["epe_moving_consistent"] == pytest.approx(
        learner / shipped["all"]["epe_moving_consistent"]
    )
    assert "| learner / the net as shipped |" in (tmp_path / "realflow-moving-64x48-night.md").read_text()
    with pytest.raises(SystemExit):
        realflow.main(["--video", str(clip), "--shift", "fog"])
