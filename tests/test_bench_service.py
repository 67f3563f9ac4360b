"""The service benchmarks' own logic: the real-clip scenario skips cleanly without its clip (a fresh clone has none),
writing nothing; sizes parse as docs/operations.md writes them (`--size 128x96`); the clip verdict holds the issue's
targets, the smallest learning size among them."""

from __future__ import annotations

from bench import service_clip
from testing.report import RESULTS


def test_the_clip_scenario_skips_without_its_clip(tmp_path, capsys):
    before = sorted(RESULTS.iterdir())
    assert service_clip.main(["--clip", str(tmp_path / "missing.mp4")]) == 0
    assert "skipped" in capsys.readouterr().out
    assert sorted(RESULTS.iterdir()) == before


def test_sizes():
    row = {"dropped": 0, "frames": 600, "expected_frames": 600, "latency_p95_s": 0.3, "latency_target_s": 0.35,
           "learning_sizes": [[160, 120], [128, 96]]}  # fmt: skip
    assert service_clip.verdict(row) and not service_clip.verdict({**row, "dropped": 1})
    assert not service_clip.verdict({**row, "latency_p95_s": 0.36}) and not service_clip.verdict({**row, "frames": 500})
    assert not service_clip.verdict({**row, "learning_sizes": [[128, 96], [112, 84]]})  # a thumbnail does not count


def test_results_index_lists_every_results_file_and_how_it_was_made(tmp_path):
    from testing.report import Run

    run = Run(command="python -m bench.example --fast", directory=tmp_path)
    run.write("example", "An example", "| a |\n|---|\n| 1 |", {"a": 1})
    (tmp_path / "old.md").write_text("# Old\n\nno header\n")
    run.write("second", "Another", "text", {})
    index = (tmp_path / "README.md").read_text()
    assert "[example.md](example.md) | An example | `python -m bench.example --fast` (" in index
    assert "[second.md](second.md)" in index and "[old.md](old.md) | Old | no provenance header |" in index
    assert "README.md](README.md)" not in index


def test_the_service_bench_says_when_in_its_window_frames_were_dropped():
    from bench import service

    records = [{"window_s": t, "dropped": d} for t, d in ((0.0, 4), (0.07, 4), (19.53, 5), (19.6, 5), (49.04, 7))]
    assert service.drop_times(records) == [[19.5, 1], [49.0, 2]]  # rises only: the drops before the window are not its
    row = {"fps": 15, "frames": 900, "dropped": 3, "dp_mean_s": 0.058, "dp_p95_s": 0.076, "latency_p50_s": 0.11,
           "latency_p95_s": 0.22, "latency_target_s": 0.23, "loss_first": 0.27, "loss_last": 0.2,
           "drops_at_s": service.drop_times(records)}  # fmt: skip
    text = service.markdown({"window_s": 60, "best_fps_zero_drops": None, "rows": [row]})
    assert "Dropped at 15 fps (s into the window: frames): 19.5: 1, 49: 2" in text
    assert "Dropped at" not in service.markdown({"window_s": 60, "best_fps_zero_drops": 15,
                                                 "rows": [{**row, "dropped": 0, "drops_at_s": []}]})  # fmt: skip
