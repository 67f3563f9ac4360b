"""``bench.cpu_loops`` times every switched call of a step both ways and whole steps alternating, and puts the step's
entry points back as it found them."""

from __future__ import annotations

import json

from bench import cpu_loops
from bench.own_kernels import PARTS


def test_each_switched_call_is_timed_both_ways_and_the_step_is_left_as_it_was(tmp_path):
    originals = {part: getattr(module, name) for part, (module, name, _) in PARTS.items()}
    args = ["--size", "64x48", "--rounds", "1", "--switch", "1", "--repeats", "1", "--out", str(tmp_path / "loops")]
    assert cpu_loops.main(args) == 0
    data = json.loads((tmp_path / "loops.json").read_text())
    parts, steps = data["parts"], data["steps"]
    assert parts["solver"]["calls"] == 1  # the shown pair's refinement
    # Four cost volumes and the fill's neighbour sums per pair, and their backwards for the pair learned from.
    assert sum(parts[p]["calls"] for p in ("window dots", "window mix", "window spread")) > 20
    assert (parts["fill colours"]["calls"], parts["fill verified"]["calls"]) == (8, 4)  # 4 and 2 reaches, both pairs
    assert all(row["loops_ms"] > 0 and row["tensor_ops_ms"] > 0 for row in parts.values())
    assert steps["steps_each"] == 1 and steps["loops_ms"] > 0 and steps["tensor_ops_ms"] > 0
    assert {part: getattr(module, name) for part, (module, name, _) in PARTS.items()} == originals
    assert "| all of them |" in (tmp_path / "loops.md").read_text()
