"""``models.order_statistics``: the sorting way (a GPU's) and numpy's partition (a CPU's) give exactly what
``kthvalue``, ``median`` and ``nanmedian`` select, ties and NaN included; compiled too; on a GPU, inside a captured
CUDA graph."""

from __future__ import annotations

import pytest
import torch

from models import order_statistics as order

#: The two ways of the k-th smallest along the last dimension (a GPU's, a CPU's), each run here on the CPU.
WAYS = (order.by_sorting, order.by_partition)


def pixels(*shape: int, seed: int = 0) -> torch.Tensor:
    """Values with many ties, as 8-bit pictures and clamped flows have."""
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(*shape, generator=g) * 40).round() / 40


@pytest.mark.parametrize(("shape", "dim"), [((2, 1001), 1), ((3, 64, 5), 1), ((777,), 0), ((2, 3, 500), -1)])
def test_the_kth_smallest_by_either_way_is_the_selected_one(shape, dim):
    t = pixels(*shape)
    n = t.shape[dim]
    for k in (1, 2, (n + 1) // 2, round(0.9 * (n - 1)) + 1, n):
        expected = t.kthvalue(k, dim).values
        for got in (order.kth_smallest(t, k, dim), *(way(t.movedim(dim, -1), k) for way in WAYS)):
            assert got.shape == expected.shape
            torch.testing.assert_close(got, expected, rtol=0, atol=0)


@pytest.mark.parametrize("n", [1000, 1001])
def test_the_median_is_the_lower_one_as_torchs(n):
    t = pixels(2, 3, n, seed=n)
    torch.testing.assert_close(order.median(t), t.median(-1).values, rtol=0, atol=0)


def test_the_median_that_skips_nan_by_either_way_is_torchs():
    """Rows with an even and an odd number of values left, with one, and with none (NaN)."""
    t = pixels(5, 300, seed=3)
    t[0, ::3] = float("nan")  # 200 left
    t[1, ::2] = float("nan")  # 150 left
    t[2, 1:] = float("nan")  # one left
    t[3] = float("nan")  # none
    expected = t.nanmedian(-1).values
    assert expected[3].isnan() and not expected[:3].isnan().any()
    for way in (order.nan_median, order.nan_median_by_sorting, order.nan_median_by_partition):
        torch.testing.assert_close(way(t.view(5, 1, 300)), expected.view(5, 1), rtol=0, atol=0, equal_nan=True)


def test_compiled_they_are_one_op_each_and_the_same():
    """Under ``torch.compile`` (the compiled step's stages) the custom ops, with no graph break (``fullgraph``)."""
    t = pixels(2, 3, 400, seed=4)
    t[0, 1, ::2] = float("nan")

    def statistics(x: torch.Tensor) -> list[torch.Tensor]:
        clean = x.nan_to_num(0.5)
        return [order.kth_smallest(clean, 40, 2), order.median(clean[0], 0), order.nan_median(x)]

    compiled = torch.compile(statistics, backend="aot_eager", fullgraph=True)
    for got, want in zip(compiled(t), statistics(t), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)


def test_no_gradient_flows_through_a_statistic():
    t = pixels(2, 100).requires_grad_()
    assert not order.kth_smallest(t, 10, 1).requires_grad and not order.nan_median(t).requires_grad


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.cuda
def test_on_a_gpu_they_are_the_cpus_and_capture_in_a_graph():
    """What the learning step reads, at 640x480's size, on the GPU (sorting) against the CPU (selecting), eagerly and
    replayed from a CUDA graph (the service's step is captured)."""
    flat, rows = pixels(2, 640 * 480, seed=1), pixels(2, 3, 320 * 240, seed=2)
    rows[0, 1, ::4] = float("nan")
    k = round(0.1 * flat.shape[1])

    def statistics(f: torch.Tensor, r: torch.Tensor) -> list[torch.Tensor]:
        return [order.kth_smallest(f, k, 1), order.median(f), order.kth_smallest(f[0], k, 0), order.nan_median(r)]

    expected = statistics(flat, rows)
    f, r = flat.cuda(), rows.cuda()
    for got, want in zip(statistics(f, r), expected, strict=True):
        torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0, equal_nan=True)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        statistics(f, r)  # warm up off the default stream before capturing, as torch's graph docs do
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = statistics(f, r)
    f.copy_(flat.flip(1).cuda())
    graph.replay()
    for got, want in zip(captured, statistics(flat.flip(1), rows), strict=True):
        torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0, equal_nan=True)
