"""The products with shifted windows (``models.window_products``) as Triton kernels, for a GPU.

Why: in tensor ops every window is its own kernel or two (a product and a sum per offset, an accumulation per offset
backwards), and the coarsest cost volume has 81 offsets: a learning step's 34 products are 1,017 of its 4,689 tensor
ops (bench/results/step-ops.md), each reading whole feature maps. Here each product is one kernel over all its
offsets. The windows of both uses lie on a square grid (``grid_of``): the cost volume's every offset within its
radius, the fill's 3 x 3 neighbours at a dilation; any other set of offsets stays with the tensor ops.

``_spread`` (the adjoint of reading the windows) gathers instead of scattering: each pixel of the padded tensor sums
what every window that covers it adds, so no two programs write one place and the sum is the same at every run.

``tests/test_window_products_triton.py`` runs these kernels in Triton's interpreter on the CPU against the tensor ops
and compiles them for sm_90.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from .triton_launch import OPTIONS

#: Pixels per program.
BLOCK = 128


def grid_of(offsets: tuple[tuple[int, int], ...]) -> tuple[int, int] | None:
    """(n, step) where ``offsets`` (row, column: where each window starts in the padded tensor) are the n x n grid, row
    by row, of offsets 0, step, ..., (n - 1) step; else None."""
    n = round(len(offsets) ** 0.5)
    step = offsets[1][1] if len(offsets) > 1 else 1
    grid = tuple((i * step, j * step) for i in range(n) for j in range(n))
    return (n, step) if step > 0 and offsets == grid else None


def fits(*tensors: Tensor) -> bool:
    """Whether the kernels take these tensors: float32 on a GPU (the kernels compute in float32)."""
    return all(t.is_cuda and t.dtype == torch.float32 for t in tensors)


def _batch_stride(t: Tensor) -> int:
    """A tensor of one image serves every image of the batch (stride 0), as broadcasting does."""
    return 0 if t.shape[0] == 1 else t.stride(0)


@triton.jit
def _pixels(count, w, BLOCK: tl.constexpr):
    """This program's pixels of an image ``w`` wide: their indices, which are in it (of ``count``), rows, columns."""
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    return offs, offs < count, offs // w, offs % w


@triton.jit
def _window(y, x, k, n, step, width):
    """Where window k of the n x n grid ``step`` apart reads pixel (y, x), in a padded plane ``width`` wide."""
    return (y + (k // n) * step) * width + x + (k % n) * step


@triton.jit
def _dots_kernel(a, padded, out, channels, h, w, height, width, n, step, a_batch, padded_batch,
                 BLOCK: tl.constexpr):  # fmt: skip
    """out[b, k] = sum over channels of a[b] times window k of padded[b]."""
    b = tl.program_id(0)
    offs, here, y, x = _pixels(h * w, w, BLOCK)
    a, padded = a + b * a_batch, padded + b * padded_batch
    for k in range(n * n):
        at = _window(y, x, k, n, step, width)
        total = tl.full([BLOCK], 0.0, tl.float32)
        for c in range(channels):
            total += tl.load(a + c * h * w + offs, mask=here, other=0.0) * tl.load(
                padded + c * height * width + at, mask=here, other=0.0
            )
        tl.store(out + (b * n * n + k) * h * w + offs, total, mask=here)


@triton.jit
def _mix_kernel(weights, padded, out, channels, h, w, height, width, n, step, weights_batch, padded_batch,
                BLOCK: tl.constexpr):  # fmt: skip
    """out[b, c] = the sum over windows k of weights[b, k] times window k of padded[b, c]."""
    b = tl.program_id(0)
    offs, here, y, x = _pixels(h * w, w, BLOCK)
    weights, padded = weights + b * weights_batch, padded + b * padded_batch
    for c in range(channels):
        total = tl.full([BLOCK], 0.0, tl.float32)
        for k in range(n * n):
            total += tl.load(weights + k * h * w + offs, mask=here, other=0.0) * tl.load(
                padded + c * height * width + _window(y, x, k, n, step, width), mask=here, other=0.0
            )
        tl.store(out + (b * channels + c) * h * w + offs, total, mask=here)


@triton.jit
def _spread_kernel(weights, a, out, channels, h, w, height, width, n, step, BLOCK: tl.constexpr):
    """out[b, c] at each padded pixel: the sum, over the windows k that cover it, of weights[b, k] times a[b, c] at the
    pixel of the window that lands there."""
    b = tl.program_id(0)
    offs, here, row, column = _pixels(height * width, width, BLOCK)
    weights, a = weights + b * n * n * h * w, a + b * channels * h * w
    for c in range(channels):
        total = tl.full([BLOCK], 0.0, tl.float32)
        for k in range(n * n):
            y, x = row - (k // n) * step, column - (k % n) * step
            covered = here & (y >= 0) & (y < h) & (x >= 0) & (x < w)
            at = y * w + x
            total += tl.load(weights + k * h * w + at, mask=covered, other=0.0) * tl.load(
                a + c * h * w + at, mask=covered, other=0.0
            )
        tl.store(out + (b * channels + c) * height * width + offs, total, mask=here)


def dots(a: Tensor, padded: Tensor, n: int, step: int) -> Tensor:
    """``window_products._dots`` for the n x n grid of offsets ``step`` apart (``padded`` of one image serves every
    image of ``a``)."""
    a, padded = a.contiguous(), padded.contiguous()
    b, channels, h, w = a.shape
    out = a.new_empty(b, n * n, h, w)
    _dots_kernel[(b, triton.cdiv(h * w, BLOCK))](a, padded, out, channels, h, w, *padded.shape[-2:], n, step,
                                                 _batch_stride(a), _batch_stride(padded),
                                                 BLOCK=BLOCK, **OPTIONS)  # fmt: skip
    return out


def mix(weights: Tensor, padded: Tensor, n: int, step: int) -> Tensor:
    """``window_products._mix`` for the n x n grid of offsets ``step`` apart."""
    weights, padded = weights.contiguous(), padded.contiguous()
    b, channels, (h, w) = max(weights.shape[0], padded.shape[0]), padded.shape[1], weights.shape[-2:]
    out = weights.new_empty(b, channels, h, w)
    _mix_kernel[(b, triton.cdiv(h * w, BLOCK))](weights, padded, out, channels, h, w, *padded.shape[-2:], n, step,
                                                _batch_stride(weights), _batch_stride(padded),
                                                BLOCK=BLOCK, **OPTIONS)  # fmt: skip
    return out


def spread(weights: Tensor, a: Tensor, padded_shape: torch.Size, n: int, step: int) -> Tensor:
    """``window_products._spread`` for the n x n grid of offsets ``step`` apart (one batch: ``weights``, ``a`` and the
    padded tensor hold as many images)."""
    weights, a = weights.contiguous(), a.contiguous()
    b, channels, height, width = padded_shape
    h, w = a.shape[-2:]
    out = a.new_empty(padded_shape)
    _spread_kernel[(b, triton.cdiv(height * width, BLOCK))](weights, a, out, channels, h, w, height, width, n, step,
                                                            BLOCK=BLOCK, **OPTIONS)  # fmt: skip
    return out
