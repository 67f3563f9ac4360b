"""``bench.adaptation`` end to end on tiny streams: its files, the windows the checks read, and that every learner is
scored on every pair, before it learns from it."""

import json

import numpy as np
import pytest
import torch

from bench import adaptation, adaptation_report
from models.streams import Stream, for_net, generate, padded, save_npz


@pytest.fixture
def stream(tmp_path):
    path = tmp_path / "tiny.npz"
    save_npz(generate(size=64, frames=8, seed=4), path)
    return path


def test_one_stream_writes_each_learners_windows(stream, tmp_path):
    out = tmp_path / "tiny-night"
    assert adaptation.main(["--stream", str(stream), "--shift", "night", "--scratch", "--out", str(out)]) == 0
    result = json.loads(out.with_suffix(".json").read_text())
    assert {"frozen", "adapting", "adapting_d2", "scratch"} <= result.keys()
    for learner in ("frozen", "adapting", "adapting_d2", "scratch"):
        r = result[learner]
        assert {"first100", "last100", "whole", "per100"} <= r.keys() and len(r["pairs"]) == 7
        assert np.isfinite(r["pairs"]).all() and r["whole"] == pytest.approx(np.mean(r["pairs"]))
    # The first pair is scored before anything was learned: every learner from the shipped weights sees it alike.
    assert result["adapting"]["pairs"][0] == pytest.approx(result["frozen"]["pairs"][0], rel=1e-5)
    assert result["adapting_d2"]["pairs"][0] == pytest.approx(result["frozen"]["pairs"][0], rel=1e-5)
    assert "--shift night" in out.with_suffix(".md").read_text() and out.with_suffix(".png").is_file()


def test_a_stream_of_any_size_is_scored_on_its_own_pixels(tmp_path):
    whole = generate(size=64, frames=5, seed=4)
    odd = tmp_path / "odd.npz"  # 60x44: neither side divides by the net's 8
    save_npz(Stream(whole.frames[:, :44, :60].copy(), whole.flow[:, :44, :60].copy()), odd)
    out = tmp_path / "odd"
    assert adaptation.main(["--stream", str(odd), "--out", str(out)]) == 0
    result = json.loads(out.with_suffix(".json").read_text())
    assert all(len(result[k]["pairs"]) == 4 and np.isfinite(result[k]["pairs"]).all() for k in adaptation.RUNS
               if k != "scratch")  # fmt: skip
    assert "5 frames 60x44" in out.with_suffix(".md").read_text()


def test_padding_keeps_every_pixel_in_place_and_the_score_leaves_the_padding_out():
    small = Stream(np.arange(2 * 5 * 6 * 3, dtype=np.uint8).reshape(2, 5, 6, 3), np.ones((1, 5, 6, 2)))
    stream = padded(small, 8)
    assert stream.frames.shape == (2, 8, 8, 3) and stream.flow.shape == (1, 8, 8, 2)
    taken = for_net(small, 8)  # what the benchmarks score: the padded frames, the stream's own flow
    assert (taken.frames == stream.frames).all() and (taken.flow == small.flow).all()
    assert (stream.frames[:, :5, :6] == np.arange(180).reshape(2, 5, 6, 3)).all()
    assert (stream.frames[:, 5:, :6] == stream.frames[:, 4:5, :6]).all()  # the last row repeated
    shown = torch.zeros(1, 2, 8, 8)
    shown[..., 5:, :] = shown[..., :, 6:] = 100.0  # a flow far off, only where the frames were padded
    assert adaptation.scored(shown, np.zeros((5, 6, 2), np.float32)) == 0.0


def test_a_stream_that_is_no_stream_is_refused_in_words(tmp_path, capsys):
    bad = tmp_path / "bad.npz"
    np.savez(bad, frames=np.zeros((3, 64, 64, 3), np.uint8))
    with pytest.raises(SystemExit):
        adaptation.main(["--stream", str(bad)])
    assert "cannot read the stream" in capsys.readouterr().err


def test_the_summary_reads_the_targets_off_the_streams():
    pairs = np.linspace(1.0, 0.5, 300)
    frozen = {**adaptation.windows(np.ones(300)), "pairs": np.ones(300).tolist()}
    learner = {**adaptation.windows(pairs), "pairs": pairs.tolist()}
    run = {"frozen": frozen, "adapting": learner, "adapting_d2": learner, "started": "2026-12-06 12:00 UTC"}
    streams = {"photo-1": run, "photo-1-night": run}
    text, data = adaptation_report.summary(streams, {})
    assert data["targets"]["unshifted_last100_median"] == pytest.approx(pairs[-100:].mean())
    assert data["targets"]["shifted_last100"] == {"photo-1-night": pytest.approx(pairs[-100:].mean())}
    assert data["targets"]["never_worse_max"] == pytest.approx(pairs[:100].mean())
    assert data["targets"]["d2_over_d1_max"] == pytest.approx(1.0) and "| photo-1-night |" in text


def test_a_set_run_in_parts_sums_up_whole(tmp_path):
    (tmp_path / "a.json").write_text(json.dumps({"started": "earlier", "frozen": 1}))
    (tmp_path / "b.json").write_text(json.dumps({"started": "earlier", "frozen": 2}))
    got = adaptation_report.with_kept(
        tmp_path, ["a", "b", "c", "d"], {"b": {"started": "now"}, "d": {"started": "now"}}
    )
    assert list(got) == ["a", "b", "d"]  # the set's order; "c" neither run nor left by an earlier run
    assert got["a"] == {"started": "earlier", "frozen": 1} and got["b"] == got["d"] == {"started": "now"}


def test_a_summary_alone_runs_no_stream_and_reads_the_folder_s_files(tmp_path, monkeypatch):
    """After ``--stream`` runs into a set's folder (a clean stream alone: ``--only`` picks its shifted ones too)."""
    monkeypatch.setattr(adaptation, "run_stream_job", lambda *a: pytest.fail("a summary alone ran a stream"))
    pairs = np.linspace(1.0, 0.5, 300)
    frozen = {**adaptation.windows(np.ones(300)), "pairs": np.ones(300).tolist()}
    learner = {**adaptation.windows(pairs), "pairs": pairs.tolist()}
    for name in ("rocket-11", "rocket-11-night"):
        run = {"frozen": frozen, "adapting": learner, "adapting_d2": learner, "started": "2026-12-07 17:00 UTC"}
        (tmp_path / f"{name}.json").write_text(json.dumps(run))
    assert adaptation.main(["--heldout", "--summary", "--out", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["targets"]["shifted_last100"] == {"rocket-11-night": pytest.approx(pairs[-100:].mean())}
    assert "rocket-11" in (tmp_path / "summary.md").read_text()
    with pytest.raises(SystemExit):
        adaptation.main(["--heldout", "--summary", "--only", "rocket"])


def test_the_held_out_set_shares_no_photograph_or_seed_with_the_set_the_learner_was_chosen_on():
    chosen_on = adaptation.stream_set()
    held_out = adaptation.stream_set(heldout=True)
    assert {j.photo for j in held_out}.isdisjoint({j.photo for j in chosen_on})
    assert {j.seed for j in held_out}.isdisjoint({j.seed for j in chosen_on})
    # Each photograph clean and as every camera shift, so the summary reads both targets off it.
    assert sorted(j.name for j in held_out if j.photo == "camera") == sorted(
        ["camera-13", *(f"camera-13-{s}" for s in adaptation.SHIFTS)]
    )


def test_the_held_out_set_is_not_a_stream_option(capsys):
    with pytest.raises(SystemExit):
        adaptation.main(["--heldout", "--stream", "x.npz"])
    assert "--heldout" in capsys.readouterr().err


def test_the_held_out_set_at_another_size_makes_its_streams_that_size(tmp_path, monkeypatch, capsys):
    jobs = adaptation.stream_set(heldout=True, size=64)
    assert {j.size for j in jobs} == {64} and [j.name for j in jobs] == [j.name for j in adaptation.stream_set(True)]
    monkeypatch.setattr(adaptation, "CACHE", tmp_path)
    small = adaptation.StreamJob("rocket-11", 11, 4, "rocket", size=64)
    assert small.make().frames.shape == (4, 64, 64, 3) and (tmp_path / "s64_11_rocket_4.npz").is_file()
    with pytest.raises(SystemExit):
        adaptation.main(["--size", "256"])
    assert "--size goes with --heldout" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        adaptation.main(["--heldout", "--size", "100"])
    assert "--size must divide by" in capsys.readouterr().err
