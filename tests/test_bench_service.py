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
