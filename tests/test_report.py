"""The results folder's index (``testing.report.write_index``): what a benchmark's write leaves committed."""

from __future__ import annotations

from testing.report import Run


def test_the_index_lists_results_and_leaves_smoke_runs_out(tmp_path):
    """A smoke run (``--quick``, git-ignored) must not change the committed index; a real run must appear in it."""
    run = Run(directory=tmp_path)
    run.write("step", "A step", "| a |\n", {})
    run.write("step-quick", "A step, smoke", "| a |\n", {})
    index = (tmp_path / "README.md").read_text()
    assert "[step.md](step.md) | A step |" in index
    assert "quick" not in index
