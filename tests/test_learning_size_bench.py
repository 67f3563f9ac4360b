"""``bench.learning_size`` end to end on a short generated clip larger than the size the nets were made for: the files,
their rows, and that the capped learner is the fixed learner of whichever size it kept."""

import json

import pytest
import torch

from bench import learning_size
from models.streams import generate, write_mp4
from server.stream.sizing import learning_ladder


def test_writes_the_three_learners_and_the_references(tmp_path):
    clip = tmp_path / "moving.mp4"
    write_mp4(generate(size=256, frames=6, seed=3).frames[:, :192], clip, fps=15)  # 256x192: above 160
    threads = torch.get_num_threads()
    try:
        assert learning_size.main(["--video", str(clip), "--out", str(tmp_path)]) == 0
    finally:
        torch.set_num_threads(threads)
    result = json.loads((tmp_path / "learning-size-moving-256x192.json").read_text())
    assert result["picture"] == [256, 192] and result["small"] == [160, 120]
    rows = result["rows"]
    assert list(rows) == ["at 160×120, scaled up", "at 256×192", "capped (the service)",
                          "farneback at 256×192", "dis_fast at 256×192", "zero_flow at 256×192"]  # fmt: skip
    assert all(row["all"]["pairs"] == 5 for row in rows.values())
    used = [tuple(size) for size in result["sizes_used"]]
    ladder = learning_ladder((256, 192), 256)
    assert len(used) == 5 and used[0] == (256, 192)  # the cap starts open
    assert set(used) <= set(ladder[: ladder.index((160, 120)) + 1])  # never below the nets' own size
    if set(used) == {(256, 192)}:  # never capped: the capped learner is the fixed learner at the picture's size
        assert rows["capped (the service)"] == rows["at 256×192"]
    assert (tmp_path / "learning-size-moving-256x192.md").read_text().count("| capped (the service) |") == 3


def test_a_picture_no_larger_than_the_nets_size_is_refused(tmp_path):
    clip = tmp_path / "small.mp4"
    write_mp4(generate(size=64, frames=3, seed=1).frames, clip, fps=15)
    with pytest.raises(SystemExit):
        learning_size.main(["--video", str(clip), "--out", str(tmp_path)])
