"""``bench.step_ops`` counts what it says: the solver's ops, the window products' and the fill's weights' apart from
the rest of a step, and puts the step back as it found it."""

from __future__ import annotations

import json

from bench import step_ops
from bench.own_kernels import PARTS


def test_the_step_ops_are_counted_by_part_and_the_step_is_left_as_it_was(tmp_path):
    originals = {part: getattr(module, name) for part, (module, name, _) in PARTS.items()}
    assert step_ops.main(["--size", "64x48", "--out", str(tmp_path / "ops")]) == 0
    (row,) = json.loads((tmp_path / "ops.json").read_text())["rows"]
    parts = row["parts"]
    assert parts["solver"]["calls"] == 1 and parts["solver"]["ops"] > 500  # the shown pair's refinement: 5 x 5 sweeps
    # Four cost volumes and the fill's six neighbour sums per pair, and their backwards for the pair learned from.
    products = [parts[p] for p in ("window dots", "window mix", "window spread")]
    assert sum(p["calls"] for p in products) > 20 and all(p["ops"] > 2 * p["calls"] for p in products)
    # The fill's colour weights at four reaches and its verified ones at two, for each pair (shown and learned from).
    colours, verified = parts["fill colours"], parts["fill verified"]
    assert (colours["calls"], verified["calls"]) == (8, 4) and colours["ops"] > 8 * 9 and verified["ops"] > 4 * 9
    fused = sum(p["ops"] for p in parts.values())
    assert row["ops"] > fused > 0
    launches = 55 + sum(p["calls"] for p in products) + colours["calls"] + 2 * verified["calls"]
    assert row["with_gpu_kernels"] == row["ops"] - fused + launches
    assert {part: getattr(module, name) for part, (module, name, _) in PARTS.items()} == originals
    assert "| 64×48 |" in (tmp_path / "ops.md").read_text()
