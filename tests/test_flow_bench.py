"""``bench.flow`` end to end on a tiny generated stream of sides the net does not take: the files and what must hold
whatever the learners learn."""

import json

import torch

from bench import flow
from models.streams import Stream, generate, save_npz


def test_scores_every_learner_against_the_classical_methods_and_says_which_loss_it_used(tmp_path):
    stream = tmp_path / "tiny.npz"
    whole = generate(size=64, frames=6, seed=4)  # cut to 60x44: sides the net does not take, padded to them
    save_npz(Stream(whole.frames[:, :44, :60].copy(), whole.flow[:, :44, :60].copy()), stream)
    out = tmp_path / "flow-tiny"
    threads = torch.get_num_threads()
    try:
        argv = ["--stream", str(stream), "--stages", "1,2", "--occlusion-mask", "--threads", "1", "--out", str(out)]
        assert flow.main(argv) == 0
    finally:
        torch.set_num_threads(threads)
    methods = json.loads(out.with_suffix(".json").read_text())["methods"]
    assert list(methods) == ["sequential", "partime_d2", "farneback", "dis_fast", "dis_medium", "zero_flow"]
    assert methods["sequential"]["scored_pairs"] == methods["partime_d2"]["scored_pairs"] == 5
    assert methods["sequential"]["occlusion"] is True and methods["partime_d2"]["occlusion"] is True
    md = out.with_suffix(".md").read_text()
    assert "sequential / dis_fast EPE last 100" in md and "--occlusion-mask" in md
