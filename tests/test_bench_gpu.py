"""``bench.gpu`` runs every part of its code on CPU (tiny sizes, seconds-long windows): the GPU run is one call on a
lent machine with little time, and must not fail on a typo. It writes only where it is told."""

from __future__ import annotations

import json

import pytest

from bench import gpu


@pytest.mark.slow
def test_the_gpu_bench_runs_every_part_on_cpu(tmp_path):
    assert gpu.main(["--device", "cpu", "--quick", "--out-dir", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "gpu-cpu.json").read_text())
    assert "skipped" in result["cuda_tests"]
    (row,) = result["steps"]["rows"]
    assert row["way"] == "eager" and row["size"] == [64, 48] and row["step_ms"] > 0 and row["kernels"] is None
    ways = {r["way"]: r for r in result["streams"]["rows"]}
    assert set(ways) == {"processes", "threads"} and all(r["steps"] > 0 for r in ways.values()), ways
    service = result["service"]
    assert service["one_stream"]["frames"] > 0 and service["first_picture_cold_s"] > 0
    assert len(service["many_streams"]) == 2 and all(r["frames"] > 0 for r in service["many_streams"])
    text = (tmp_path / "gpu-cpu.md").read_text()
    assert "## 4. The service" in text and "| 64×48 | 1 | eager |" in text


def test_card_names_make_file_names():
    assert gpu.card_name("cpu") == "gpu-cpu"
