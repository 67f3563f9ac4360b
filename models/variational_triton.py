"""The variational refinement's solver (``models.variational.variational_solve``) as Triton kernels, for a GPU.

Why: in tensor ops each half sweep is some ten kernels and each fixed-point round's systems some fifty: 783 for five
rounds of five sweeps (bench/results/step-ops.md), each reading and writing whole images, where a whole GPU step was
about 3,500 before the refinement came (bench/results/gpu-nvidia-h100-80gb-hbm3.md). Here a round's 2x2 systems are
one kernel (``_systems``) and each half sweep another (``_half_sweep``): 55 launches. The arithmetic is
``solve_reference``'s, pixel by pixel; a half sweep writes only the pixels of its colour, whose four neighbours are all
of the other colour, so it updates the increment in place as the reference's two vectorised halves do.

``tests/test_variational_triton.py`` runs these kernels in Triton's interpreter on the CPU against the reference
(``TRITON_INTERPRET=1``) and compiles them for sm_90; on a GPU it compares the refined flow with the CPU's.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from .triton_launch import OPTIONS
from .variational_energy import Energy

#: Pixels per program.
BLOCK = 256


def fits(flow: Tensor, terms: Tensor, inside: Tensor) -> bool:
    """Whether the kernels take these tensors: float32 (the kernels compute in it)."""
    return all(t.dtype == torch.float32 for t in (flow, terms, inside))


@triton.jit
def _total(flow, step, plane, offs, ok):
    """The flow so far (flow + increment) at ``offs`` of one image, both components; zero where not ``ok`` (outside
    the image, as the reference's zero padding)."""
    u = tl.load(flow + offs, mask=ok, other=0.0) + tl.load(step + offs, mask=ok, other=0.0)
    v = tl.load(flow + plane + offs, mask=ok, other=0.0) + tl.load(step + plane + offs, mask=ok, other=0.0)
    return u, v


@triton.jit
def _forward_edges(flow, step, inside, plane, y, x, h, w, here, alpha_half, eps2):
    """The smoothness weights on a pixel's edges to its right and lower neighbours (``_smoothness``' ``forward``), for
    the pixels at rows ``y`` and columns ``x`` (zero where ``here`` is false)."""
    offs = y * w + x
    tu, tv = _total(flow, step, plane, offs, here)
    ru, rv = _total(flow, step, plane, offs + 1, here & (x + 1 < w))
    bu, bv = _total(flow, step, plane, offs + w, here & (y + 1 < h))
    gxu, gxv, gyu, gyv = ru - tu, rv - tv, bu - tu, bv - tv
    per_pixel = tl.div_rn(alpha_half, tl.sqrt_rn(gxu * gxu + gyu * gyu + gxv * gxv + gyv * gyv + eps2))
    right = per_pixel * tl.load(inside + offs, mask=here, other=0.0)
    below = per_pixel * tl.load(inside + plane + offs, mask=here, other=0.0)
    return tl.where(here, right, 0.0), tl.where(here, below, 0.0)


@triton.jit
def _four(terms, plane, offs, here):
    """Four consecutive planes of ``terms`` at ``offs`` (1 outside: a normalisation never divides by zero)."""
    a = tl.load(terms + offs, mask=here, other=1.0)
    b = tl.load(terms + plane + offs, mask=here, other=1.0)
    c = tl.load(terms + 2 * plane + offs, mask=here, other=1.0)
    d = tl.load(terms + 3 * plane + offs, mask=here, other=1.0)
    return a, b, c, d


@triton.jit
def _target(step, rhs, offs, w, e0, e1, e2, e3, mine, ok_r, ok_l, ok_b, ok_a):
    """One component's right-hand side plus its four neighbours' increments, each by its edge's weight."""
    return (tl.load(rhs + offs, mask=mine, other=0.0)
            + e0 * tl.load(step + offs + 1, mask=ok_r, other=0.0)
            + e1 * tl.load(step + offs - 1, mask=ok_l, other=0.0)
            + e2 * tl.load(step + offs + w, mask=ok_b, other=0.0)
            + e3 * tl.load(step + offs - w, mask=ok_a, other=0.0))  # fmt: skip


@triton.jit
def _systems(flow, step, terms, inside, edges, rhs, inverse, h, w, inside_batch, alpha_half, delta_half,
             gamma_half, eps2, floor, BLOCK: tl.constexpr):  # fmt: skip
    """One fixed-point round's systems at the current increment: each pixel's four edge weights, its right-hand side
    and its 2x2 system's inverse (diagonal for u, for v, and the off-diagonal term)."""
    b = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    plane = h * w
    here = offs < plane
    y, x = offs // w, offs % w
    flow, step = flow + b * 2 * plane, step + b * 2 * plane
    terms, inside = terms + b * 12 * plane, inside + b * inside_batch
    edges, rhs, inverse = edges + b * 4 * plane, rhs + b * 2 * plane, inverse + b * 3 * plane

    e0, e2 = _forward_edges(flow, step, inside, plane, y, x, h, w, here, alpha_half, eps2)
    e1, _ = _forward_edges(flow, step, inside, plane, y, x - 1, h, w, here & (x > 0), alpha_half, eps2)
    _, e3 = _forward_edges(flow, step, inside, plane, y - 1, x, h, w, here & (y > 0), alpha_half, eps2)

    du = tl.load(step + offs, mask=here, other=0.0)
    dv = tl.load(step + plane + offs, mask=here, other=0.0)
    iz, ix, iy, n = _four(terms, plane, offs, here)
    ixz, ixx, ixy, nx = _four(terms + 4 * plane, plane, offs, here)
    iyz, ixy2, iyy, ny = _four(terms + 8 * plane, plane, offs, here)
    # Divisions and roots rounded as IEEE rounds them (``div_rn``, ``sqrt_rn``), as the CPU's loops are: Triton's ``/``
    # and ``sqrt`` are approximate on a GPU, which moved a few refined pixels by up to 0.1 px on an H200
    # (docs/notebook/2026-12-04-the-gpu-step-measured-again.md).
    r = iz + ix * du + iy * dv
    bright = tl.div_rn(delta_half, tl.sqrt_rn(tl.div_rn(r * r, n) + eps2))
    gx, gy = ixz + ixx * du + ixy * dv, iyz + ixy2 * du + iyy * dv
    grad = tl.div_rn(gamma_half, tl.sqrt_rn(tl.div_rn(gx * gx, nx) + tl.div_rn(gy * gy, ny) + eps2))
    degree = e0 + e1 + e2 + e3
    a11 = (
        bright * tl.div_rn(ix * ix, n) + grad * (tl.div_rn(ixx * ixx, nx) + tl.div_rn(ixy2 * ixy2, ny)) + degree + floor
    )
    a12 = bright * tl.div_rn(ix * iy, n) + grad * (tl.div_rn(ixx * ixy, nx) + tl.div_rn(ixy2 * iyy, ny))
    a22 = bright * tl.div_rn(iy * iy, n) + grad * (tl.div_rn(ixy * ixy, nx) + tl.div_rn(iyy * iyy, ny)) + degree + floor
    b1 = bright * tl.div_rn(-iz * ix, n) + grad * (tl.div_rn(-ixz * ixx, nx) - tl.div_rn(iyz * ixy2, ny))
    b2 = bright * tl.div_rn(-iz * iy, n) + grad * (tl.div_rn(-ixz * ixy, nx) - tl.div_rn(iyz * iyy, ny))

    # The smoothness pulls the flow itself towards its neighbours' too: the flow's differences to them, weighted.
    u0 = tl.load(flow + offs, mask=here, other=0.0)
    v0 = tl.load(flow + plane + offs, mask=here, other=0.0)
    ok_r, ok_l, ok_b, ok_a = here & (x + 1 < w), here & (x > 0), here & (y + 1 < h), here & (y > 0)
    pull_u = (e0 * (tl.load(flow + offs + 1, mask=ok_r, other=0.0) - u0)
              + e1 * (tl.load(flow + offs - 1, mask=ok_l, other=0.0) - u0)
              + e2 * (tl.load(flow + offs + w, mask=ok_b, other=0.0) - u0)
              + e3 * (tl.load(flow + offs - w, mask=ok_a, other=0.0) - u0))  # fmt: skip
    pull_v = (e0 * (tl.load(flow + plane + offs + 1, mask=ok_r, other=0.0) - v0)
              + e1 * (tl.load(flow + plane + offs - 1, mask=ok_l, other=0.0) - v0)
              + e2 * (tl.load(flow + plane + offs + w, mask=ok_b, other=0.0) - v0)
              + e3 * (tl.load(flow + plane + offs - w, mask=ok_a, other=0.0) - v0))  # fmt: skip
    det = a11 * a22 - a12 * a12
    tl.store(edges + offs, e0, mask=here)
    tl.store(edges + plane + offs, e1, mask=here)
    tl.store(edges + 2 * plane + offs, e2, mask=here)
    tl.store(edges + 3 * plane + offs, e3, mask=here)
    tl.store(rhs + offs, b1 + pull_u, mask=here)
    tl.store(rhs + plane + offs, b2 + pull_v, mask=here)
    tl.store(inverse + offs, tl.div_rn(a22, det), mask=here)
    tl.store(inverse + plane + offs, tl.div_rn(a11, det), mask=here)
    tl.store(inverse + 2 * plane + offs, tl.div_rn(-a12, det), mask=here)


@triton.jit
def _half_sweep(step, edges, rhs, inverse, h, w, colour, omega, BLOCK: tl.constexpr):
    """One half of a red-black SOR sweep: the pixels whose row + column has parity ``colour`` solve their 2x2 system
    with their neighbours' increments (all of the other colour) and move by ``omega`` times the way to the solution."""
    b = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    plane = h * w
    y, x = offs // w, offs % w
    mine = (offs < plane) & ((y + x) % 2 == colour)
    step, edges = step + b * 2 * plane, edges + b * 4 * plane
    rhs, inverse = rhs + b * 2 * plane, inverse + b * 3 * plane
    ok_r, ok_l, ok_b, ok_a = mine & (x + 1 < w), mine & (x > 0), mine & (y + 1 < h), mine & (y > 0)
    e0 = tl.load(edges + offs, mask=mine, other=0.0)
    e1 = tl.load(edges + plane + offs, mask=mine, other=0.0)
    e2 = tl.load(edges + 2 * plane + offs, mask=mine, other=0.0)
    e3 = tl.load(edges + 3 * plane + offs, mask=mine, other=0.0)
    tu = _target(step, rhs, offs, w, e0, e1, e2, e3, mine, ok_r, ok_l, ok_b, ok_a)
    tv = _target(step + plane, rhs + plane, offs, w, e0, e1, e2, e3, mine, ok_r, ok_l, ok_b, ok_a)
    off = tl.load(inverse + 2 * plane + offs, mask=mine, other=0.0)
    su = tl.load(inverse + offs, mask=mine, other=0.0) * tu + off * tv
    sv = tl.load(inverse + plane + offs, mask=mine, other=0.0) * tv + off * tu
    u = tl.load(step + offs, mask=mine, other=0.0)
    v = tl.load(step + plane + offs, mask=mine, other=0.0)
    tl.store(step + offs, u + omega * (su - u), mask=mine)
    tl.store(step + plane + offs, v + omega * (sv - v), mask=mine)


def solve(flow: Tensor, terms: Tensor, inside: Tensor, fixed_point_iterations: int, sor_iterations: int,
          energy: Energy) -> Tensor:  # fmt: skip
    """``solve_reference`` in Triton kernels (``fits`` says which tensors they take)."""
    flow, terms, inside = flow.contiguous(), terms.contiguous(), inside.contiguous()
    b, _, h, w = flow.shape
    step = torch.zeros_like(flow)
    edges, rhs, inverse = flow.new_empty(b, 4, h, w), torch.empty_like(flow), flow.new_empty(b, 3, h, w)
    grid = (b, triton.cdiv(h * w, BLOCK))
    inside_batch = 0 if inside.shape[0] == 1 else 2 * h * w  # one map for every image, or one each
    for _ in range(fixed_point_iterations):
        _systems[grid](flow, step, terms, inside, edges, rhs, inverse, h, w, inside_batch, energy.alpha / 2,
                       energy.delta / 2, energy.gamma / 2, energy.epsilon**2, energy.floor,
                       BLOCK=BLOCK, **OPTIONS)  # fmt: skip
        for _ in range(sor_iterations):
            for colour in (0, 1):
                _half_sweep[grid](step, edges, rhs, inverse, h, w, colour, energy.omega, BLOCK=BLOCK, **OPTIONS)
    return step
