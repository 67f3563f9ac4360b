"""The variational refinement's solver (``models.variational.variational_solve``) compiled for the CPU by Numba.

Why: in tensor ops the solver is 783 small ops (bench/results/step-ops.md), each a pass over a whole 128x96 image whose
cost is mostly the op's own: a fifth of the shown pair's forward on the CPU service. Here a fixed-point round's 2x2
systems are one loop over the pixels (``_systems``) and each half sweep another (``_half_sweep``), the arithmetic
``models.variational_triton``'s, pixel by pixel: a half sweep writes only the pixels of its colour, whose four
neighbours are all of the other colour, as the reference's two vectorised halves do.

``tests/test_variational_numba.py`` checks it against ``solve_reference``.
"""

from __future__ import annotations

import math

import numba
import numpy as np
import torch
from torch import Tensor

from .variational_energy import Energy

#: Compiled once per machine and cached beside this module (``cache``); ``error_model="numpy"``: a division by zero
#: gives inf or NaN as torch's would, with no check per division; ``nogil``: threads that each run a learner do not
#: wait on one another here.
_jit = numba.njit(cache=True, error_model="numpy", nogil=True)


@_jit
def _total(flow: np.ndarray, step: np.ndarray, y: int, x: int) -> tuple[float, float]:
    return flow[0, y, x] + step[0, y, x], flow[1, y, x] + step[1, y, x]


@_jit
def _forward_edges(flow, step, inside, forward, alpha_half, eps2):  # noqa: ANN001, ANN202
    """One image's smoothness weights on each pixel's edges to its right and lower neighbours (``_smoothness``'
    ``forward``; the flow so far is zero outside the image, as the reference's padding)."""
    h, w = flow.shape[1], flow.shape[2]
    zero = np.float32(0)
    for y in range(h):
        for x in range(w):
            tu, tv = _total(flow, step, y, x)
            ru, rv = _total(flow, step, y, x + 1) if x + 1 < w else (zero, zero)
            bu, bv = _total(flow, step, y + 1, x) if y + 1 < h else (zero, zero)
            gxu, gxv, gyu, gyv = ru - tu, rv - tv, bu - tu, bv - tv
            per_pixel = alpha_half / math.sqrt(gxu * gxu + gyu * gyu + gxv * gxv + gyv * gyv + eps2)
            forward[0, y, x], forward[1, y, x] = per_pixel * inside[0, y, x], per_pixel * inside[1, y, x]


@_jit
def _rows(terms, rows):  # noqa: ANN001, ANN202
    """One image's data term rows, once a refinement (``variational._DataTerm``): (a11, a12, a22, b1, b2) of the
    brightness term normalised, then of the two gradient terms normalised and summed."""
    h, w = terms.shape[1], terms.shape[2]
    for y in range(h):
        for x in range(w):
            iz, ix, iy, n = terms[0, y, x], terms[1, y, x], terms[2, y, x], terms[3, y, x]
            ixz, ixx, ixy, nx = terms[4, y, x], terms[5, y, x], terms[6, y, x], terms[7, y, x]
            iyz, ixy2, iyy, ny = terms[8, y, x], terms[9, y, x], terms[10, y, x], terms[11, y, x]
            rows[0, y, x], rows[1, y, x], rows[2, y, x] = ix * ix / n, ix * iy / n, iy * iy / n
            rows[3, y, x], rows[4, y, x] = -iz * ix / n, -iz * iy / n
            rows[5, y, x] = ixx * ixx / nx + ixy2 * ixy2 / ny
            rows[6, y, x] = ixx * ixy / nx + ixy2 * iyy / ny
            rows[7, y, x] = ixy * ixy / nx + iyy * iyy / ny
            rows[8, y, x] = -ixz * ixx / nx + -iyz * ixy2 / ny
            rows[9, y, x] = -ixz * ixy / nx + -iyz * iyy / ny


@_jit
def _systems(flow, step, terms, rows, forward, edges, rhs, inverse, delta_half, gamma_half, eps2, floor):  # noqa: ANN001, ANN202
    """One image's fixed-point round: each pixel's four edge weights (its own ``forward`` ones, its left and upper
    neighbours' towards it), its right-hand side and its 2x2 system's inverse (diagonal for u, for v, and the
    off-diagonal term), at the current increment."""
    h, w = flow.shape[1], flow.shape[2]
    zero = np.float32(0)
    for y in range(h):
        for x in range(w):
            e0, e2 = forward[0, y, x], forward[1, y, x]
            e1 = forward[0, y, x - 1] if x > 0 else zero
            e3 = forward[1, y - 1, x] if y > 0 else zero
            du, dv = step[0, y, x], step[1, y, x]
            iz, ix, iy, n = terms[0, y, x], terms[1, y, x], terms[2, y, x], terms[3, y, x]
            ixz, ixx, ixy, nx = terms[4, y, x], terms[5, y, x], terms[6, y, x], terms[7, y, x]
            iyz, ixy2, iyy, ny = terms[8, y, x], terms[9, y, x], terms[10, y, x], terms[11, y, x]
            r = iz + ix * du + iy * dv
            bright = delta_half / math.sqrt(r * r / n + eps2)
            gx, gy = ixz + ixx * du + ixy * dv, iyz + ixy2 * du + iyy * dv
            grad = gamma_half / math.sqrt(gx * gx / nx + gy * gy / ny + eps2)
            degree = e0 + e1 + e2 + e3
            a11 = bright * rows[0, y, x] + grad * rows[5, y, x] + degree + floor
            a12 = bright * rows[1, y, x] + grad * rows[6, y, x]
            a22 = bright * rows[2, y, x] + grad * rows[7, y, x] + degree + floor
            b1 = bright * rows[3, y, x] + grad * rows[8, y, x]
            b2 = bright * rows[4, y, x] + grad * rows[9, y, x]
            # The smoothness pulls the flow itself towards its neighbours' too: the flow's differences to them.
            pull_u, pull_v = np.float32(0), np.float32(0)
            u0, v0 = flow[0, y, x], flow[1, y, x]
            if x + 1 < w:
                pull_u += e0 * (flow[0, y, x + 1] - u0)
                pull_v += e0 * (flow[1, y, x + 1] - v0)
            if x > 0:
                pull_u += e1 * (flow[0, y, x - 1] - u0)
                pull_v += e1 * (flow[1, y, x - 1] - v0)
            if y + 1 < h:
                pull_u += e2 * (flow[0, y + 1, x] - u0)
                pull_v += e2 * (flow[1, y + 1, x] - v0)
            if y > 0:
                pull_u += e3 * (flow[0, y - 1, x] - u0)
                pull_v += e3 * (flow[1, y - 1, x] - v0)
            det = a11 * a22 - a12 * a12
            edges[0, y, x], edges[1, y, x], edges[2, y, x], edges[3, y, x] = e0, e1, e2, e3
            rhs[0, y, x], rhs[1, y, x] = b1 + pull_u, b2 + pull_v
            inverse[0, y, x], inverse[1, y, x], inverse[2, y, x] = a22 / det, a11 / det, -a12 / det


@_jit
def _half_sweep(step, edges, rhs, inverse, colour, omega):  # noqa: ANN001, ANN202
    """One image's half of a red-black SOR sweep: the pixels whose row + column has parity ``colour`` solve their 2x2
    system with their neighbours' increments (all of the other colour) and move ``omega`` times the way there."""
    h, w = step.shape[1], step.shape[2]
    for y in range(h):
        for x in range((y + colour) % 2, w, 2):
            e0, e1, e2, e3 = edges[0, y, x], edges[1, y, x], edges[2, y, x], edges[3, y, x]
            tu, tv = rhs[0, y, x], rhs[1, y, x]
            if x + 1 < w:
                tu += e0 * step[0, y, x + 1]
                tv += e0 * step[1, y, x + 1]
            if x > 0:
                tu += e1 * step[0, y, x - 1]
                tv += e1 * step[1, y, x - 1]
            if y + 1 < h:
                tu += e2 * step[0, y + 1, x]
                tv += e2 * step[1, y + 1, x]
            if y > 0:
                tu += e3 * step[0, y - 1, x]
                tv += e3 * step[1, y - 1, x]
            off = inverse[2, y, x]
            su, sv = inverse[0, y, x] * tu + off * tv, inverse[1, y, x] * tv + off * tu
            u, v = step[0, y, x], step[1, y, x]
            step[0, y, x], step[1, y, x] = u + omega * (su - u), v + omega * (sv - v)


@_jit
def _solve(flow, terms, inside, step, rounds, sweeps, alpha, delta, gamma, epsilon, omega, floor):  # noqa: ANN001, ANN202
    b, _, h, w = flow.shape
    edges = np.empty((4, h, w), dtype=flow.dtype)
    rhs = np.empty((2, h, w), dtype=flow.dtype)
    inverse = np.empty((3, h, w), dtype=flow.dtype)
    forward = np.empty((2, h, w), dtype=flow.dtype)
    rows = np.empty((10, h, w), dtype=flow.dtype)
    half = np.float32(2)
    for i in range(b):
        mask = inside[min(i, inside.shape[0] - 1)]
        _rows(terms[i], rows)
        for _ in range(rounds):
            _forward_edges(flow[i], step[i], mask, forward, alpha / half, epsilon * epsilon)
            _systems(flow[i], step[i], terms[i], rows, forward, edges, rhs, inverse, delta / half, gamma / half,
                     epsilon * epsilon, floor)  # fmt: skip
            for _ in range(sweeps):
                _half_sweep(step[i], edges, rhs, inverse, 0, omega)
                _half_sweep(step[i], edges, rhs, inverse, 1, omega)


def fits(flow: Tensor, terms: Tensor, inside: Tensor) -> bool:
    """Whether the loops take these tensors: float32 on the CPU (the loops compute in float32 as the reference does)."""
    return all(t.device.type == "cpu" and t.dtype == torch.float32 for t in (flow, terms, inside))


def solve(flow: Tensor, terms: Tensor, inside: Tensor, fixed_point_iterations: int, sor_iterations: int,
          energy: Energy) -> Tensor:  # fmt: skip
    """``solve_reference`` in compiled loops (``fits`` says which tensors they take)."""
    step = torch.zeros_like(flow, memory_format=torch.contiguous_format)
    arrays = (t.detach().contiguous().numpy() for t in (flow, terms, inside))
    _solve(*arrays, step.numpy(), fixed_point_iterations, sor_iterations, *(np.float32(v) for v in energy))
    return step
