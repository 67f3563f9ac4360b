"""The edge-aware fill's neighbour weights (``models.flow_cleanup``) as Triton kernels, for a GPU.

Why: in tensor ops a fill's weights are some 180 of the 405 ops of a fill over one pair (nine shifted colour
differences, their exponentials and normalisation a reach; nine warps, a window's running sums and a comparison a
verified reach: bench/results/step-ops.md), each a kernel over a small image. Here a reach's colour weights are one
kernel, and a verified reach two: the nine warps' errors, then their windows' means and how each compares with the
best. The arithmetic is the tensor ops' (sums over the channels, a window's mean summed directly rather than as a
difference of running sums, a warp's position read without ``grid_sample``'s round trip through [-1, 1]).

The colour scale is read on the device (no value goes back to the host: the GPU's step is captured as a graph), and
neither kernel takes a gradient: where the scale learns (pretraining), the tensor ops run.

``tests/test_fill_triton.py`` runs these kernels in Triton's interpreter on the CPU against the tensor ops and compiles
them for sm_90.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from .triton_launch import OPTIONS

#: Pixels per program.
BLOCK = 128


def fits(*tensors: Tensor) -> bool:
    """Whether the kernels take these tensors: float32 on a GPU."""
    return all(t.is_cuda and t.dtype == torch.float32 for t in tensors)


@triton.jit
def _pixels(h, w, BLOCK: tl.constexpr):
    """This program's pixels of an image h x w: their indices, which are in it, rows, columns."""
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    return offs, offs < h * w, offs // w, offs % w


@triton.jit
def _neighbour(y, x, k, dilation, h, w):
    """Index of neighbour k (of the 3 x 3 at ``dilation``, row by row) of pixel (y, x), edges replicated."""
    ny = tl.minimum(tl.maximum(y + (k // 3 - 1) * dilation, 0), h - 1)
    nx = tl.minimum(tl.maximum(x + (k % 3 - 1) * dilation, 0), w - 1)
    return ny * w + nx


@triton.jit
def _similar(image, offs, here, y, x, k, channels, dilation, h, w, scale):
    """e^(scale · the mean absolute colour difference between each pixel and its neighbour k)."""
    at = _neighbour(y, x, k, dilation, h, w)
    diff = tl.full(offs.shape, 0.0, tl.float32)
    for c in range(channels):
        plane = image + c * h * w
        diff += tl.abs(tl.load(plane + at, mask=here, other=0.0) - tl.load(plane + offs, mask=here, other=0.0))
    return tl.exp(scale * (diff / channels))


@triton.jit
def _similarity_kernel(image, edge, out, channels, h, w, dilation, BLOCK: tl.constexpr):
    """out[b, k] = e^(-edge · colour difference to neighbour k) over the nine's sum."""
    b = tl.program_id(0)
    offs, here, y, x = _pixels(h, w, BLOCK)
    image, out = image + b * channels * h * w, out + b * 9 * h * w
    scale = -tl.load(edge)
    total = tl.full([BLOCK], 0.0, tl.float32)
    for k in range(9):
        total += _similar(image, offs, here, y, x, k, channels, dilation, h, w, scale)
    for k in range(9):
        similar = _similar(image, offs, here, y, x, k, channels, dilation, h, w, scale)
        tl.store(out + k * h * w + offs, similar / total, mask=here)


@triton.jit
def _errors_kernel(prev, cur, flow, out, h, w, dilation, BLOCK: tl.constexpr):
    """out[b, k] = |prev - cur warped back by neighbour k's flow| (bilinear, border padding; NaN reads the corner, as
    ``models.flow_loss.warp`` reads it)."""
    b = tl.program_id(0)
    offs, here, y, x = _pixels(h, w, BLOCK)
    prev, cur, flow, out = prev + b * h * w, cur + b * h * w, flow + b * 2 * h * w, out + b * 9 * h * w
    first = tl.load(prev + offs, mask=here, other=0.0)
    for k in range(9):
        at = _neighbour(y, x, k, dilation, h, w)
        px = x.to(tl.float32) + tl.load(flow + at, mask=here, other=0.0)
        py = y.to(tl.float32) + tl.load(flow + h * w + at, mask=here, other=0.0)
        px = tl.where(px != px, 0.0, tl.minimum(tl.maximum(px, 0.0), (w - 1).to(tl.float32)))
        py = tl.where(py != py, 0.0, tl.minimum(tl.maximum(py, 0.0), (h - 1).to(tl.float32)))
        x0, y0 = px.to(tl.int32), py.to(tl.int32)
        fx, fy = px - x0.to(tl.float32), py - y0.to(tl.float32)
        x1, y1 = tl.minimum(x0 + 1, w - 1), tl.minimum(y0 + 1, h - 1)
        top = (1.0 - fx) * tl.load(cur + y0 * w + x0, mask=here, other=0.0) + fx * tl.load(
            cur + y0 * w + x1, mask=here, other=0.0
        )
        bottom = (1.0 - fx) * tl.load(cur + y1 * w + x0, mask=here, other=0.0) + fx * tl.load(
            cur + y1 * w + x1, mask=here, other=0.0
        )
        tl.store(out + k * h * w + offs, tl.abs(first - ((1.0 - fy) * top + fy * bottom)), mask=here)


@triton.jit
def _window_mean(errors, here, y, x, h, w, half):
    """The mean of ``errors`` (one plane) over each pixel's window 2 · half + 1 wide, edges replicated."""
    total = tl.full(y.shape, 0.0, tl.float32)
    for i in range(-half, half + 1):
        row = tl.minimum(tl.maximum(y + i, 0), h - 1) * w
        for j in range(-half, half + 1):
            total += tl.load(errors + row + tl.minimum(tl.maximum(x + j, 0), w - 1), mask=here, other=0.0)
    side = 2 * half + 1
    return total / (side * side)


@triton.jit
def _explains_kernel(errors, out, h, w, half, scale, BLOCK: tl.constexpr):
    """out[b, k] = e^((the least of the nine windows' mean errors - window k's) / scale)."""
    b = tl.program_id(0)
    offs, here, y, x = _pixels(h, w, BLOCK)
    errors, out = errors + b * 9 * h * w, out + b * 9 * h * w
    best = tl.full([BLOCK], float("inf"), tl.float32)
    for k in range(9):
        best = tl.minimum(best, _window_mean(errors + k * h * w, here, y, x, h, w, half))
    for k in range(9):
        mean = _window_mean(errors + k * h * w, here, y, x, h, w, half)
        tl.store(out + k * h * w + offs, tl.exp((best - mean) / scale), mask=here)


def similarity(image: Tensor, edge: Tensor, dilation: int) -> Tensor:
    """``flow_cleanup.similarity_reference`` as one kernel: (B, 9, H, W)."""
    image = image.contiguous()
    batch, channels, h, w = image.shape
    out = image.new_empty(batch, 9, h, w)
    _similarity_kernel[(batch, triton.cdiv(h * w, BLOCK))](image, edge.detach().reshape(1), out, channels, h, w,
                                                           dilation, BLOCK=BLOCK, **OPTIONS)  # fmt: skip
    return out


def explains(prev: Tensor, cur: Tensor, flow: Tensor, dilation: int, window: int, scale: float) -> Tensor:
    """``flow_cleanup.explains_reference`` as two kernels: (B, 9, H, W) in (0, 1]."""
    prev, cur, flow = prev.contiguous(), cur.contiguous(), flow.contiguous()
    batch, _, h, w = prev.shape
    grid = (batch, triton.cdiv(h * w, BLOCK))
    errors = prev.new_empty(batch, 9, h, w)
    _errors_kernel[grid](prev, cur, flow, errors, h, w, dilation, BLOCK=BLOCK, **OPTIONS)
    out = torch.empty_like(errors)
    _explains_kernel[grid](errors, out, h, w, window // 2, scale, BLOCK=BLOCK, **OPTIONS)
    return out
