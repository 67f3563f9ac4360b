"""``bench.step_ops`` counts what it says: the solver's ops and the window products' apart from the rest of a step,
and puts the step back as it found it."""

from __future__ import annotations

import json

from bench import step_ops
from models import variational, window_products


def test_the_step_ops_are_counted_by_part_and_the_step_is_left_as_it_was(tmp_path):
    originals = (variational.variational_solve, window_products._dots, window_products._mix, window_products._spread)
    assert step_ops.main(["--size", "64x48", "--out", str(tmp_path / "ops")]) == 0
    (row,) = json.loads((tmp_path / "ops.json").read_text())["rows"]
    solver, products = row["parts"]["solver"], row["parts"]["window products"]
    assert solver["calls"] == 1 and solver["ops"] > 500  # the shown pair's refinement: 5 rounds of 5 sweeps
    # Four cost volumes and the fill's six neighbour sums per pair, and their backwards for the pair learned from.
    assert products["calls"] > 20 and products["ops"] > 10 * products["calls"]
    assert row["ops"] > solver["ops"] + products["ops"] > 0
    assert row["with_gpu_kernels"] == row["ops"] - solver["ops"] - products["ops"] + 55 + products["calls"]
    assert (variational.variational_solve, window_products._dots, window_products._mix,
            window_products._spread) == originals  # fmt: skip
    assert "| 64×48 |" in (tmp_path / "ops.md").read_text()
