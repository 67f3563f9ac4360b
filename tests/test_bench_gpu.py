"""``bench.gpu`` runs every part of its code on CPU (tiny sizes, seconds-long windows): the GPU run is one call on a
lent machine with little time, and must not fail on a typo. It writes only where it is told."""

from __future__ import annotations

import json

import pytest

from bench import gpu

pytestmark = pytest.mark.realtime


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


def test_a_steps_device_time_is_told_by_kernel_name_most_first():
    """The profiler's demangled names, cut short; calls and time summed per name; the largest graph step's table."""
    from bench import gpu_step

    kernels = [("void at::native::(anonymous namespace)::gatherKthValue<float, int, 1>(x)", 1500.0)] * 2
    kernels += [("void at::native::elementwise_kernel<128, 2>(y)", 10.0)] * 30 + [("_systems", 200.0)]
    device_ms, top = gpu_step.kernel_time(kernels)
    assert device_ms == pytest.approx(3.5)
    assert [(name[:14], calls) for name, calls, _ in top] == [("gatherKthValue", 2), ("elementwise_ke", 30),
                                                               ("_systems", 1)]  # fmt: skip
    assert top[0][2] == pytest.approx(3.0) and all(len(name) <= gpu_step.KERNEL_NAME_CHARS for name, _, _ in top)

    def row(size: list[int], way: str) -> dict:
        return {"size": size, "stages": 1, "way": way, "kernels": 33, "device_ms": device_ms, "top_kernels": top}

    rows = [row([160, 120], "graph"), row([640, 480], "eager"), row([320, 240], "graph")]
    lines = gpu._steps_lines({"table": ["| table |"], "errors": [], "rows": rows})
    assert lines[0] == "| table |" and any("(320×240, D = 1, graph; 3.50 ms over 33 kernels)" in li for li in lines)
    assert any(li.startswith("| `gatherKthValue") and li.endswith("| 2 | 3.000 | 86% |") for li in lines)
