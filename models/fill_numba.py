"""The edge-aware fill's neighbour weights (``models.flow_cleanup``) compiled for the CPU by Numba.

Why: the fill decides how much each pixel's nine neighbours count at four reaches, from their colours and, at the two
farthest, from how well each neighbour's flow explains the pixel. In tensor ops that is some 180 of a fill's 405 ops
over small images (nine shifted differences a reach, nine warps and two running sums a verified reach), whose cost is
mostly the ops' own: the fill was a quarter of the service's forward at 128x96 (exploratory:
docs/notebook/2026-11-29-the-fills-weights-as-loops.md). Here the differences, the warps and the sums are one loop
nest each (their exponentials stay tensor ops, vectorised there), in the tensor ops' order of arithmetic: the same
numbers to float32's rounding (a warp reads its pixel position without ``grid_sample``'s round trip through [-1, 1];
a window's mean sums directly, not as a difference of running sums).

Neither takes a gradient: the fill decides its weights without differentiating them while it learns online
(``EdgeAwareFill.learn_scales``); where the colour scale learns (pretraining), the tensor ops run.

``tests/test_fill_numba.py`` checks them against the tensor ops.
"""

from __future__ import annotations

import math

import numba
import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

#: As ``models.window_products_numba``: compiled once per machine, cached beside this module, the GIL released.
_jit = numba.njit(cache=True, nogil=True)


@_jit
def _colour_differences(image, padded, dilation, out):  # noqa: ANN001, ANN202
    batch, channels, h, w = image.shape
    for b in range(batch):
        for k in range(9):
            dy, dx = (k // 3) * dilation, (k % 3) * dilation
            for y in range(h):
                row = out[b, k, y]
                row[:] = 0
                for c in range(channels):
                    pixel, neighbour = image[b, c, y], padded[b, c, y + dy, dx : dx + w]
                    for x in range(w):
                        row[x] += abs(neighbour[x] - pixel[x])
                for x in range(w):
                    row[x] /= np.float32(channels)


@_jit
def _window_errors(prev, cur, flow, dilation, half, out):  # noqa: ANN001, ANN202
    batch, _, h, w = prev.shape
    errors = np.empty((h + 2 * half, w + 2 * half), dtype=prev.dtype)  # edges replicated
    rows = np.empty((h + 2 * half, w), dtype=prev.dtype)
    last_x, last_y = np.float32(w - 1), np.float32(h - 1)
    for b in range(batch):
        first, second, u, v = prev[b, 0], cur[b, 0], flow[b, 0], flow[b, 1]
        for k in range(9):
            dy, dx = (k // 3 - 1) * dilation, (k % 3 - 1) * dilation
            for y in range(h):
                ny = min(max(y + dy, 0), h - 1)
                for x in range(w):
                    nx = min(max(x + dx, 0), w - 1)
                    # The warp's reading (models.flow_loss.warp): bilinear, border padding, NaN at the corner.
                    px, py = np.float32(x) + u[ny, nx], np.float32(y) + v[ny, nx]
                    px = np.float32(0) if math.isnan(px) else min(max(px, np.float32(0)), last_x)
                    py = np.float32(0) if math.isnan(py) else min(max(py, np.float32(0)), last_y)
                    x0, y0 = int(px), int(py)
                    fx, fy = px - np.float32(x0), py - np.float32(y0)
                    x1, y1 = min(x0 + 1, w - 1), min(y0 + 1, h - 1)
                    top = (np.float32(1) - fx) * second[y0, x0] + fx * second[y0, x1]
                    bottom = (np.float32(1) - fx) * second[y1, x0] + fx * second[y1, x1]
                    errors[y + half, x + half] = abs(first[y, x] - ((np.float32(1) - fy) * top + fy * bottom))
                for i in range(half):
                    errors[y + half, i] = errors[y + half, half]
                    errors[y + half, w + half + i] = errors[y + half, w + half - 1]
            for i in range(half):
                errors[i] = errors[half]
                errors[h + half + i] = errors[h + half - 1]
            for y in range(h + 2 * half):  # the window's sum: along the rows, then the columns
                row, padded_row = rows[y], errors[y]
                row[:] = 0
                for i in range(2 * half + 1):
                    for x in range(w):
                        row[x] += padded_row[x + i]
            for y in range(h):
                total = out[b, k, y]
                total[:] = 0
                for i in range(2 * half + 1):
                    row = rows[y + i]
                    for x in range(w):
                        total[x] += row[x]


def fits(*tensors: Tensor) -> bool:
    """Whether the loops take these tensors: on the CPU, float32 (the loops round as float32 does)."""
    return all(t.device.type == "cpu" and t.dtype == torch.float32 for t in tensors)


def _array(t: Tensor) -> np.ndarray:
    return np.ascontiguousarray(t.detach().numpy())


def similarity(image: Tensor, edge: Tensor, dilation: int) -> Tensor:
    """``flow_cleanup.similarity_reference`` with the colour differences in loops: (B, 9, H, W), each pixel's 3x3
    neighbours at ``dilation`` weighted by e^(-edge · their mean absolute colour difference), normalised to sum to one.
    The exponential in a tensor op: vectorised there, where a loop's is one value at a time."""
    batch, _, h, w = image.shape
    out = image.new_empty(batch, 9, h, w)
    padded = F.pad(image, [dilation] * 4, mode="replicate")  # eager only: no custom op for Dynamo needed
    _colour_differences(_array(image), _array(padded), dilation, out.numpy())
    similar = out.mul_(-edge).exp_()
    return similar / similar.sum(1, keepdim=True)


def explains(prev: Tensor, cur: Tensor, flow: Tensor, dilation: int, window: int, scale: float) -> Tensor:
    """``flow_cleanup.explains_reference`` with the warps and the windows' sums in loops: (B, 9, H, W) in (0, 1], how
    well each 3x3 neighbour's ``flow`` at ``dilation`` explains the pixel's ``window`` of brightness (``prev``,
    ``cur``: (B, 1, H, W)) against the best of the nine."""
    batch, _, h, w = prev.shape
    errors = prev.new_empty(batch, 9, h, w)
    _window_errors(_array(prev), _array(cur), _array(flow), dilation, window // 2, errors.numpy())
    errors /= window * window
    return torch.exp((errors.amin(1, keepdim=True) - errors) / scale)
