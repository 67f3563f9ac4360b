"""``bench.step_ops`` counts what it says: the solver's ops, the window products' and the fill's weights' apart from
the rest of a step, and puts the step back as it found it."""

from __future__ import annotations

import json

from bench import step_ops
from models import flow_cleanup, variational, window_products


def test_the_step_ops_are_counted_by_part_and_the_step_is_left_as_it_was(tmp_path):
    originals = (variational.variational_solve, window_products._dots, window_products._mix, window_products._spread,
                 flow_cleanup._similarity, flow_cleanup._explains)  # fmt: skip
    assert step_ops.main(["--size", "64x48", "--out", str(tmp_path / "ops")]) == 0
    (row,) = json.loads((tmp_path / "ops.json").read_text())["rows"]
    solver, products = row["parts"]["solver"], row["parts"]["window products"]
    assert solver["calls"] == 1 and solver["ops"] > 500  # the shown pair's refinement: 5 rounds of 5 sweeps
    # Four cost volumes and the fill's six neighbour sums per pair, and their backwards for the pair learned from.
    assert products["calls"] > 20 and products["ops"] > 10 * products["calls"]
    # The fill's colour weights at four reaches and its verified ones at two, for each pair (shown and learned from).
    colours, verified = row["parts"]["fill colours"], row["parts"]["fill verified"]
    assert (colours["calls"], verified["calls"]) == (8, 4) and colours["ops"] > 8 * 9 and verified["ops"] > 4 * 9
    fused = solver["ops"] + products["ops"] + colours["ops"] + verified["ops"]
    assert row["ops"] > fused > 0
    launches = 55 + products["calls"] + colours["calls"] + 2 * verified["calls"]
    assert row["with_gpu_kernels"] == row["ops"] - fused + launches
    assert (variational.variational_solve, window_products._dots, window_products._mix, window_products._spread,
            flow_cleanup._similarity, flow_cleanup._explains) == originals  # fmt: skip
    assert "| 64×48 |" in (tmp_path / "ops.md").read_text()
