"""Variational refinement: the flow taken to the minimum of a smooth, robust energy around it, as DIS ends.

A net's flow is decided window by window, each pixel by its own evidence, and where the working size leaves that
evidence thin (a slow mover's sub-pixel motion, a surface with little texture) the estimate is noisy from pixel to
pixel; every window-by-window method left about the same error there (box at 160x120: the learned flow and
Farneback's, whose residuals correlate at 0.74). The classical answer is the energy of Brox et al. (2004), which DIS
(Kroeger et al. 2016) minimises around its patch flow as its last step: brightness and gradient constancy, each
normalised by the image gradient and penalised robustly (a Charbonnier penalty, about L1), plus a robust penalty on
the flow's gradient. Near the net's flow one linearisation suffices: the current frame is warped back once, and a
few fixed-point rounds (each re-weighing the robust penalties) of a few red-black SOR sweeps solve for the
increment. Where a pixel has evidence the data term holds it; where it has little, its surface's motion evens it
out; the robust smoothness keeps motion boundaries. The energy's weights and the solver's are DIS's (OpenCV's
``VariationalRefinement``, which ``tests/test_variational.py`` checks this against). After a still gate it does not
smooth across the gate's decision, a motion boundary: across it the smoothness pulled the still background's zero
into the movers the gate kept (small movers before a still background: 0.93 → 0.99 times the better classical
method's error, 0.96 not across). On the real clips it took the moving pixels' error from 0.99 to 0.85 times the
better classical method's on box's whole clip and from 1.00 to 0.89 on bikes' first 30 pairs
(docs/models.md#the-flow-ends-as-diss-does-a-variational-refinement).

Nothing to learn, and the refinement reads the flow without differentiating it: the gradient of the refined flow
passes to the flow it started from (straight through), as the propagation step's does. Every shape is fixed and no
value is read back to the host, so a CUDA graph captures it."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .cpu_loops import numba_installed
from .flow_cleanup import central_differences, frames_of
from .flow_loss import warp
from .luma import luma
from .variational_energy import ALPHA, DELTA, DIAGONAL_FLOOR, ENERGY, EPSILON, GAMMA, OMEGA, ZETA
from .window_products import LIBRARY


def _grey(rgb: Tensor) -> Tensor:
    """(B, 1, H, W) luma in 0-255 of an RGB image in [0, 1]: the grey level the energy is written on."""
    return luma(rgb) * 255.0


def _derivatives(t: Tensor) -> tuple[Tensor, Tensor]:
    """t(x + 1) - t(x - 1) along x and along y, edges replicated: OpenCV's Sobel of size 1, which DIS's refinement
    uses (twice the derivative; the energy's weights were set with it)."""
    dx, dy = central_differences(t)
    return 2 * dx, 2 * dy


def _grid(height: int, width: int, like: Tensor) -> tuple[Tensor, Tensor]:
    """(1, 2, H, W): which of each pixel's edges to its right and lower neighbours exist (none in the last column,
    none in the last row); and (2, 1, 1, H, W) the over-relaxation of each half sweep: on the red cells of a
    checkerboard, whose 4-neighbours are all black, then on the black ones (Gauss-Seidel in two vectorised halves).
    Made of comparisons, not assignments: a scalar written into a tensor is an upload from the host on a GPU."""
    ys = torch.arange(height, device=like.device)[:, None]
    xs = torch.arange(width, device=like.device)[None, :]
    inside = torch.stack([(xs < width - 1).expand(height, width), (ys < height - 1).expand(height, width)])
    red = (ys + xs) % 2 == 0
    halves = torch.stack([red, ~red]).to(like.dtype) * OMEGA
    return inside.to(like.dtype)[None], halves[:, None, None]


def _neighbours(t: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Each pixel's right, left, lower and upper neighbours' values of ``t`` (B, C, H, W), zero outside: views of one
    padding, not ``flow_cleanup.neighbours``' stacked copy (the sweeps read them fifty times a refinement)."""
    h, w = t.shape[-2:]
    p = F.pad(t, [1, 1, 1, 1])
    return p[..., 1 : h + 1, 2:], p[..., 1 : h + 1, :w], p[..., 2:, 1 : w + 1], p[..., :h, 1 : w + 1]


def image_terms(flow: Tensor, prev: Tensor, cur: Tensor) -> Tensor:
    """(B, 12, H, W): the image terms of the energy per pixel, for brightness constancy and for the constancy of the x
    and of the y gradient four channels each: its linearised residual's constant, its factors on the increment's x and
    y components, and the normalisation it is divided by. Computed once per refinement, on the mean of the previous
    frame and the current one warped back by ``flow`` (only the robust weights change from one fixed-point round to
    the next)."""
    i0, i1 = _grey(prev), _grey(warp(cur, flow))
    mean = 0.5 * (i0 + i1)
    ix, iy = _derivatives(mean)
    (ixx, ixy), (_, iyy) = _derivatives(ix), _derivatives(iy)
    iz = i1 - i0
    ixz, iyz = _derivatives(iz)
    zeta2 = ZETA * ZETA
    norm, norm_x, norm_y = ix**2 + iy**2 + zeta2, ixx**2 + ixy**2 + zeta2, iyy**2 + ixy**2 + zeta2
    # Linearised residuals: brightness iz + ix du + iy dv; gradients ixz + ixx du + ixy dv, iyz + ixy du + iyy dv.
    return torch.cat([iz, ix, iy, norm, ixz, ixx, ixy, norm_x, iyz, ixy, iyy, norm_y], 1)


class _DataTerm:
    """The data term's 2x2 systems: the products they are made of, normalised, once per refinement."""

    def __init__(self, terms: Tensor) -> None:
        self.brightness, *self.gradients = (tuple(t.split(1, 1)) for t in terms.split(4, 1))
        # Each term's share of (a11, a12, a22, b1, b2), the rows of its normal equations.
        rows = [torch.cat([x * x, x * y, y * y, -t * x, -t * y], 1) / n for t, x, y, n in
                (self.brightness, *self.gradients)]  # fmt: skip
        self.brightness_rows, self.gradient_rows = rows[0], rows[1] + rows[2]

    def system(self, step: Tensor) -> tuple[Tensor, ...]:
        """The data term's 2x2 system per pixel, (a11, a12, a22, b1, b2), robustly weighted at the current
        increment ``step``."""
        du, dv = step.split(1, 1)
        eps2 = EPSILON * EPSILON
        t, x, y, n = self.brightness
        brightness = (DELTA / 2) * torch.rsqrt((t + x * du + y * dv) ** 2 / n + eps2)
        gradients = sum((t + x * du + y * dv) ** 2 / n for t, x, y, n in self.gradients)
        gradient = (GAMMA / 2) * torch.rsqrt(gradients + eps2)
        return torch.addcmul(brightness * self.brightness_rows, gradient, self.gradient_rows).split(1, 1)


def _smoothness(total: Tensor, inside: Tensor) -> Tensor:
    """(B, 4, 1, H, W): the smoothness term's weight on the edges from each pixel to its right, left, lower and upper
    neighbours (zero where there is none). One robust weight per pixel, from the flow so far's (``total``) forward
    differences, on its edges to the right and below; ``inside`` (B or 1, 2, H, W) scales those two: 0 where there
    is no such neighbour (and, after a still gate, where the gate decided the two pixels apart)."""
    right, _, below, _ = _neighbours(total)
    gx, gy = right - total, below - total
    per_pixel = (ALPHA / 2) * torch.rsqrt((gx**2 + gy**2).sum(1, keepdim=True) + EPSILON**2)
    forward = per_pixel * inside  # (B, 2, H, W): to the right, below
    _, left, _, above = _neighbours(forward)  # the left neighbour's edge to the right is this pixel's to the left
    return torch.stack([forward[:, :1], left[:, :1], forward[:, 1:], above[:, 1:]], 1)


def _same_side(keep: Tensor) -> Tensor:
    """(B, 2, H, W): how far each pixel and its right, and its lower, neighbour fell on the same side of a still gate's
    decision ``keep`` (B, 1, H, W; 1 kept, 0 gated): k k' + (1 - k)(1 - k')."""
    right, _, below, _ = _neighbours(keep)
    return torch.cat([keep * right + (1 - keep) * (1 - right), keep * below + (1 - keep) * (1 - below)], 1)


def solve_reference(flow: Tensor, terms: Tensor, inside: Tensor, fixed_point_iterations: int,
                    sor_iterations: int) -> Tensor:  # fmt: skip
    """The increment (B, 2, H, W) that takes ``flow`` to the energy's minimum, in tensor ops: the fixed-point rounds
    of red-black SOR sweeps. The reference every other kernel of ``variational_solve`` is checked against."""
    data = _DataTerm(terms)
    _, halves = _grid(*flow.shape[-2:], flow)
    around = torch.stack(_neighbours(flow), 1) - flow.unsqueeze(1)  # the flow's differences to its neighbours
    step = torch.zeros_like(flow)
    for _ in range(fixed_point_iterations):
        a11, a12, a22, b1, b2 = data.system(step)
        edges = _smoothness(flow + step, inside)
        degree = edges.sum(1)
        # The smoothness pulls the flow itself towards its neighbours' too, not only the increment.
        rhs = torch.cat([b1, b2], 1) + (edges * around).sum(1)
        a11, a22 = a11 + degree + DIAGONAL_FLOOR, a22 + degree + DIAGONAL_FLOOR
        det = a11 * a22 - a12 * a12
        # The per-pixel 2x2 system's inverse: its diagonal (for u and v) and its off-diagonal term.
        diagonal, off = torch.cat([a22, a11], 1) / det, -a12 / det
        weights = edges.unbind(1)
        for _ in range(sor_iterations):
            for relax in halves:
                (w0, *ws), (n0, *ns) = weights, _neighbours(step)
                target = torch.addcmul(rhs, w0, n0)  # a new tensor: no copy of rhs to add into
                for weight, neighbour in zip(ws, ns, strict=True):
                    target.addcmul_(weight, neighbour)
                solved = torch.addcmul(diagonal * target, off, target.flip(1))
                step = torch.lerp(step, solved, relax)
    return step


@torch.library.custom_op(f"{LIBRARY}::variational_solve", mutates_args=())
def variational_solve(flow: Tensor, terms: Tensor, inside: Tensor, fixed_point_iterations: int,
                      sor_iterations: int) -> Tensor:  # fmt: skip
    """``solve_reference`` as one op: one node of a compiled graph, and on a GPU one kernel per fixed-point round and
    per half sweep (``models.variational_triton``: 55 launches at 5 x 5, where the tensor ops are 783:
    bench/results/step-ops.md)."""
    return solve_reference(flow, terms, inside, fixed_point_iterations, sor_iterations)


@variational_solve.register_fake
def _variational_solve_shape(flow: Tensor, terms: Tensor, inside: Tensor, fixed_point_iterations: int,
                             sor_iterations: int) -> Tensor:  # fmt: skip
    return torch.empty_like(flow)


@variational_solve.register_kernel("cpu")
def _variational_solve_cpu(flow: Tensor, terms: Tensor, inside: Tensor, fixed_point_iterations: int,
                           sor_iterations: int) -> Tensor:  # fmt: skip
    """The loops compiled by Numba (``models.variational_numba``) where they take the tensors; else the tensor ops."""
    if numba_installed():
        from . import variational_numba

        if variational_numba.fits(flow, terms, inside):
            return variational_numba.solve(flow, terms, inside, fixed_point_iterations, sor_iterations, ENERGY)
    return solve_reference(flow, terms, inside, fixed_point_iterations, sor_iterations)


@variational_solve.register_kernel("cuda")
def _variational_solve_cuda(flow: Tensor, terms: Tensor, inside: Tensor, fixed_point_iterations: int,
                            sor_iterations: int) -> Tensor:  # fmt: skip
    from . import variational_triton  # imported on a GPU only: Triton comes with torch's CUDA wheels

    if not variational_triton.fits(flow, terms, inside):
        return solve_reference(flow, terms, inside, fixed_point_iterations, sor_iterations)
    return variational_triton.solve(flow, terms, inside, fixed_point_iterations, sor_iterations, ENERGY)


def refine_flow(
    flow: Tensor,
    prev: Tensor,
    cur: Tensor,
    fixed_point_iterations: int = 5,
    sor_iterations: int = 5,
    keep: Tensor | None = None,
) -> Tensor:
    """(B, 2, H, W) ``flow`` (previous → current, px) refined on the frames ``prev`` and ``cur`` (B, 3, H, W, RGB in
    [0, 1]) by the variational energy (module docstring); with a still gate's ``keep`` (B, 1, H, W), the smoothness
    does not reach across the gate's decision. Computed without a graph: the caller decides what the gradient does."""
    with torch.no_grad():
        terms = image_terms(flow, prev, cur)
        inside, _ = _grid(*flow.shape[-2:], flow)
        if keep is not None:
            inside = inside * _same_side(keep)
        return flow + variational_solve(flow, terms, inside, fixed_point_iterations, sor_iterations)


class VariationalRefinement(nn.Module):
    """[flow, frames, ...] -> the same tensor with the flow refined (``refine_flow``); the gradient passes straight
    through to the flow it started from. ``after_gate``: the tensor ends with a still gate's decision
    (``StillGate(hands_on_keep=True)``), which the refinement reads and drops.

    Only what is shown is refined (``pipeline_core.partition.only_shown``): a pair the learner learns from beside the
    one it shows (``models.online.KNOWN_MOTION``) is scored on the flow before it. Through it, learning moved the
    same weights to the same errors (coffee's clean stream 0.930x its frozen start over its last 100 pairs, flicker
    0.786x; box's consistent moving pixels 1.021x over the clip, carphone's 1.007x), and its forward was a sixth of
    the pair's: ``docs/notebook/2026-11-29-what-a-learned-pair-needs-of-the-net.md``."""

    only_shown = True

    def __init__(self, fixed_point_iterations: int = 5, sor_iterations: int = 5, after_gate: bool = False) -> None:
        super().__init__()
        self.fixed_point_iterations, self.sor_iterations = fixed_point_iterations, sor_iterations
        self.after_gate = after_gate

    def forward(self, x: Tensor) -> Tensor:
        flow, (prev, cur) = x[:, :2], frames_of(x).split(3, 1)
        keep, rest = (x[:, -1:], x[:, 2:-1]) if self.after_gate else (None, x[:, 2:])
        refined = refine_flow(flow.detach(), prev, cur, self.fixed_point_iterations, self.sor_iterations, keep)
        return torch.cat([flow + (refined - flow.detach()), rest], 1)
