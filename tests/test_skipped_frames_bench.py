"""``bench.skipped_frames`` end to end on a tiny run: the rows it writes (the numbers live in bench/results/)."""

import json

import torch

from bench import skipped_frames


def test_writes_a_row_per_depth_stride_and_supervision(tmp_path):
    threads = torch.get_num_threads()
    try:
        argv = ["--size", "64", "--loops", "2", "--strides", "8", "--stages", "2", "--out", str(tmp_path)]
        assert skipped_frames.main(argv) == 0
    finally:
        torch.set_num_threads(threads)
    result = json.loads((tmp_path / "skipped-frames.json").read_text())
    rows = result["rows"]
    assert [(r["stages"], r["stride"], r["supervised"]) for r in rows] == [(2, 8, True), (2, 8, False)]
    for r in rows:
        assert len(r["loops"]) == 2 and all(0 < v < float("inf") for v in r["loops"]) and r["zero_flow"] > 0
    # With deep supervision the stale stage learns; without it, it may diverge (what the bench is there to show: since
    # the still gate stopped zeroing the flow wherever the frames changed, it no longer hides a diverging flow).
    assert all(v < rows[0]["zero_flow"] for v in rows[0]["loops"])
    assert "| 2 | 8 | on |" in (tmp_path / "skipped-frames.md").read_text()
