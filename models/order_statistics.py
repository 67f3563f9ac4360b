"""Order statistics of a picture's pixels (a k-th smallest value, a median, a median that skips NaN) that cost little
on a GPU as well as on a CPU.

Why: on CUDA, ``kthvalue``, ``median`` and ``nanmedian`` select within each row on one block of threads, so a row of
a whole picture's pixels runs on a sliver of the GPU: at 640x480 their 25 kernels took 19 ms of a learning step's
36 ms of device time on an H200 (docs/notebook/2026-12-04-the-gpu-step-measured-again.md). A sort runs on the whole
GPU; the k-th value of the sorted row is the same value, so the two ways agree exactly. On a CPU selection is the
cheaper way (``torch.quantile``, which sorts, took ten times as long at 128x96) and stays.
"""

from __future__ import annotations

from torch import Tensor


def kth_smallest(t: Tensor, k: int, dim: int = -1) -> Tensor:
    """The ``k``-th smallest value (1-based) along ``dim``, which is dropped: ``t.kthvalue(k, dim).values``."""
    if t.device.type == "cpu":
        return t.kthvalue(k, dim).values
    return sorted_kth_smallest(t, k, dim)


def sorted_kth_smallest(t: Tensor, k: int, dim: int = -1) -> Tensor:
    """``kth_smallest`` by sorting (the GPU's way; any device, for the tests)."""
    return t.sort(dim).values.select(dim, k - 1)


def median(t: Tensor, dim: int = -1) -> Tensor:
    """The lower median along ``dim``, which is dropped, as ``t.median(dim).values`` (NaN not expected)."""
    return kth_smallest(t, (t.shape[dim] + 1) // 2, dim)


def nan_median(t: Tensor) -> Tensor:
    """The lower median of the values that are not NaN along the last dimension, which is dropped, as
    ``t.nanmedian(-1).values``: NaN where a row has none."""
    if t.device.type == "cpu":
        return t.nanmedian(-1).values
    return sorted_nan_median(t)


def sorted_nan_median(t: Tensor) -> Tensor:
    """``nan_median`` by sorting (NaN sorts last; the GPU's way; any device, for the tests)."""
    counted = (~t.isnan()).sum(-1, keepdim=True)
    middle = (counted - 1).clamp_min(0) // 2
    return t.sort(-1).values.gather(-1, middle).squeeze(-1)
