"""The window products (``models.window_products``) compiled for the CPU by Numba.

Why: in tensor ops a product is two ops per offset (a product and a channel sum, or a weighted add), up to 81 offsets
a cost volume, each over a small image whose cost is mostly the op's own: a step of the service's net at 128x96 makes
about 1,600 of them (bench/results/step-ops.md). Here a product is one loop nest, each image row's products in
consecutive memory (the loops over a row vectorise). The sums run in the tensor ops' order (channel by channel,
offset by offset), the same numbers to float32's rounding.

``tests/test_window_products_numba.py`` checks them against the tensor ops.
"""

from __future__ import annotations

import numba
import numpy as np
import torch
from torch import Tensor

#: Compiled once per machine and cached beside this module; ``nogil``: threads that each run a learner (a GPU's
#: streams, tests) do not wait on one another here.
_jit = numba.njit(cache=True, nogil=True)


@_jit
def _dots(a, padded, offsets, out):  # noqa: ANN001, ANN202
    batch, channels, h, w = a.shape
    for b in range(batch):
        for k in range(offsets.shape[0]):
            dy, dx = offsets[k, 0], offsets[k, 1]
            out[b, k] = 0
            for c in range(channels):
                for y in range(h):
                    row, first, window = out[b, k, y], a[b, c, y], padded[b, c, y + dy, dx : dx + w]
                    for x in range(w):
                        row[x] += first[x] * window[x]


@_jit
def _mix(weights, padded, offsets, out):  # noqa: ANN001, ANN202
    batch, channels, h, w = out.shape
    for b in range(batch):
        for c in range(channels):
            for k in range(offsets.shape[0]):
                dy, dx = offsets[k, 0], offsets[k, 1]
                for y in range(h):
                    row, weight, window = out[b, c, y], weights[b, k, y], padded[b, c, y + dy, dx : dx + w]
                    if k == 0:
                        for x in range(w):
                            row[x] = window[x] * weight[x]
                    else:
                        for x in range(w):
                            row[x] += window[x] * weight[x]


@_jit
def _spread(weights, a, offsets, out):  # noqa: ANN001, ANN202
    batch, channels, h, w = a.shape
    for b in range(batch):
        for c in range(channels):
            for k in range(offsets.shape[0]):
                dy, dx = offsets[k, 0], offsets[k, 1]
                for y in range(h):
                    row, weight, first = out[b, c, y + dy, dx : dx + w], weights[b, k, y], a[b, c, y]
                    for x in range(w):
                        row[x] += weight[x] * first[x]


def fits(*tensors: Tensor) -> bool:
    """Whether the loops take these tensors: on the CPU, all float32 or all float64 (one compiled loop per type)."""
    dtype = tensors[0].dtype
    return dtype in (torch.float32, torch.float64) and all(t.device.type == "cpu" and t.dtype == dtype for t in tensors)


def _array(t: Tensor, batch: int) -> np.ndarray:
    """``t`` as a C-contiguous array of ``batch`` images (one image repeated for many): the loops are compiled for
    that layout alone."""
    return np.ascontiguousarray(t.detach().expand(batch, *t.shape[1:]).numpy())


def _offsets(offsets: tuple[tuple[int, int], ...]) -> np.ndarray:
    return np.asarray(offsets, dtype=np.int64).reshape(-1, 2)


def dots(a: Tensor, padded: Tensor, offsets: tuple[tuple[int, int], ...]) -> Tensor:
    """``window_products.dots_reference`` in loops: (B, K, h, w), per offset k the channel sum of ``a`` times window
    k of ``padded``."""
    batch, h, w = max(a.shape[0], padded.shape[0]), *a.shape[-2:]
    out = a.new_empty(batch, len(offsets), h, w)
    _dots(_array(a, batch), _array(padded, batch), _offsets(offsets), out.numpy())
    return out


def mix(weights: Tensor, padded: Tensor, offsets: tuple[tuple[int, int], ...]) -> Tensor:
    """``window_products.mix_reference`` in loops: (B, C, h, w), the sum over offsets k of window k of ``padded`` times
    ``weights[:, k]``."""
    batch, h, w = max(weights.shape[0], padded.shape[0]), *weights.shape[-2:]
    out = weights.new_empty(batch, padded.shape[1], h, w)
    _mix(_array(weights, batch), _array(padded, batch), _offsets(offsets), out.numpy())
    return out


def spread(weights: Tensor, a: Tensor, padded_shape: torch.Size, offsets: tuple[tuple[int, int], ...]) -> Tensor:
    """``window_products.spread_reference`` in loops: each offset's ``weights[:, k]`` times ``a``, added back where
    window k lies."""
    out = a.new_zeros(padded_shape)
    _spread(_array(weights, padded_shape[0]), _array(a, padded_shape[0]), _offsets(offsets), out.numpy())
    return out
