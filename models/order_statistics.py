"""Order statistics of a picture's pixels (a k-th smallest value, a median, a median that skips NaN), each the way
that costs least on its device; every way gives the same values, exactly.

Why not ATen's ``kthvalue``, ``median`` and ``nanmedian``: on CUDA they select within each row on one block of
threads, so a row of a whole picture's pixels runs on a sliver of the GPU (at 640x480 their 25 kernels took 19 ms of a
learning step's 36 ms of device time on an H200), where a sort runs on the whole GPU; on a CPU they cost more than
numpy's partition (introselect) on one thread: a learning step's 13 k-th smallest values at 128x96 1.23 ms against
0.32, its 12 medians that skip NaN 1.20 against 0.71 (bench/results/cpu-loops.md;
docs/notebook/2026-12-04-the-gpu-step-measured-again.md).
Under ``torch.compile`` each is a ``torch.library`` custom op with those two kernels, which Dynamo does not trace
into. They are statistics read off the picture: no gradient flows through them.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from .window_products import LIBRARY


def kth_smallest(t: Tensor, k: int, dim: int = -1) -> Tensor:
    """The ``k``-th smallest value (1-based) along ``dim``, which is dropped: ``t.kthvalue(k, dim).values``."""
    rows = t.detach().movedim(dim, -1)
    if torch.compiler.is_compiling():
        return kth_smallest_op(rows, k)
    return by_partition(rows, k) if rows.device.type == "cpu" else by_sorting(rows, k)


def median(t: Tensor, dim: int = -1) -> Tensor:
    """The lower median along ``dim``, which is dropped, as ``t.median(dim).values`` (NaN not expected)."""
    return kth_smallest(t, (t.shape[dim] + 1) // 2, dim)


def nan_median(t: Tensor) -> Tensor:
    """The lower median of the values that are not NaN along the last dimension, which is dropped, as
    ``t.nanmedian(-1).values``: NaN where a row has none."""
    rows = t.detach()
    if torch.compiler.is_compiling():
        return nan_median_op(rows)
    return nan_median_by_partition(rows) if rows.device.type == "cpu" else nan_median_by_sorting(rows)


def kth_smallest_reference(rows: Tensor, k: int) -> Tensor:
    """ATen's selection along the last dimension (what the two ways replace; ``bench.own_kernels``)."""
    return rows.kthvalue(k, -1).values


def nan_median_reference(rows: Tensor) -> Tensor:
    """ATen's selection of ``nan_median`` (what the two ways replace; ``bench.own_kernels``)."""
    return rows.nanmedian(-1).values


def by_sorting(rows: Tensor, k: int) -> Tensor:
    """The ``k``-th smallest along the last dimension by sorting (the GPU's way)."""
    return rows.sort(-1).values[..., k - 1]


def by_partition(rows: Tensor, k: int) -> Tensor:
    """The ``k``-th smallest along the last dimension by numpy's partition (a CPU's way)."""
    picked = np.partition(rows.contiguous().numpy(), k - 1, axis=-1)[..., k - 1]
    return torch.from_numpy(np.array(picked))  # a copy, 0-d for one row (ascontiguousarray makes that 1-d)


def nan_median_by_sorting(rows: Tensor) -> Tensor:
    """``nan_median`` by sorting (NaN sorts last; the GPU's way)."""
    counted = (~rows.isnan()).sum(-1, keepdim=True)
    middle = (counted - 1).clamp_min(0) // 2
    return rows.sort(-1).values.gather(-1, middle).squeeze(-1)


def nan_median_by_partition(rows: Tensor) -> Tensor:
    """``nan_median`` by numpy's partition, a row at a time (each has its own count; a CPU's way)."""
    flat = rows.contiguous().numpy().reshape(-1, rows.shape[-1])
    medians = np.full(flat.shape[0], np.nan, dtype=flat.dtype)
    for i, row in enumerate(flat):
        kept = row[~np.isnan(row)]
        if kept.size:
            middle = (kept.size - 1) // 2
            medians[i] = np.partition(kept, middle)[middle]
    return torch.from_numpy(medians).reshape(rows.shape[:-1])


@torch.library.custom_op(f"{LIBRARY}::kth_smallest", mutates_args=())
def kth_smallest_op(rows: Tensor, k: int) -> Tensor:
    """``kth_smallest`` along the last dimension as one op (sorting; a CPU's kernel partitions)."""
    return by_sorting(rows, k).clone()


@kth_smallest_op.register_kernel("cpu")
def _kth_smallest_cpu(rows: Tensor, k: int) -> Tensor:
    return by_partition(rows, k)


@kth_smallest_op.register_fake
def _kth_smallest_shape(rows: Tensor, k: int) -> Tensor:
    return rows.new_empty(rows.shape[:-1])


@torch.library.custom_op(f"{LIBRARY}::nan_median", mutates_args=())
def nan_median_op(rows: Tensor) -> Tensor:
    """``nan_median`` as one op (sorting; a CPU's kernel partitions)."""
    return nan_median_by_sorting(rows)


@nan_median_op.register_kernel("cpu")
def _nan_median_cpu(rows: Tensor) -> Tensor:
    return nan_median_by_partition(rows)


@nan_median_op.register_fake
def _nan_median_shape(rows: Tensor) -> Tensor:
    return rows.new_empty(rows.shape[:-1])
