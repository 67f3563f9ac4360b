"""Products of a tensor with shifted windows of a padded one, with hand-written backwards.

Two uses, each the other's adjoint: the cost volume's dot products of features with every offset of the other frame's
features (``window_dots``, ``models.correlation``), and the edge-aware fill's weighted sums of every pixel's neighbours
(``window_mix``, ``models.flow_cleanup``). The backward of either is made of the other and of ``_spread``.

Why hand-written: autograd's own backward of each shifted slice allocates and zero-fills a padded-size tensor per
offset; here every offset's share accumulates in place into one. Why loops over views and not ``F.unfold``: it copies
the padded tensor once per offset, and at the service's sizes the loops, whose every product stays in the cache, were
faster. Those tensor ops (``dots_reference`` and its kin) are the reference: on a GPU each product is one Triton
kernel over all its offsets (``models.window_products_triton``), on the CPU one compiled loop nest
(``models.window_products_numba``).
"""

from __future__ import annotations

from types import ModuleType

import torch
from torch import Tensor
from torch.autograd.function import FunctionCtx, once_differentiable

from .cpu_loops import numba_installed

#: Where each window starts in the padded tensor, (row, column); a window has the unpadded size.
Offsets = tuple[tuple[int, int], ...]


def _windows(padded: Tensor, h: int, w: int, offsets: Offsets) -> list[Tensor]:
    """The (h, w) windows of ``padded`` that start at ``offsets``, as views. Why not one slice per window: at the
    service's sizes these products are small and their cost is mostly per op, two slices per offset among them;
    ``unfold`` makes every window a view in one op, and ``unbind`` hands out a row of them in one more."""
    grid = padded.unfold(-2, h, 1).unfold(-2, w, 1)  # (..., rows, columns, h, w): a view, no copy
    rows: dict[int, tuple[Tensor, ...]] = {}
    windows = []
    for dy, dx in offsets:
        if dy not in rows:
            rows[dy] = grid.select(-4, dy).unbind(-3)
        windows.append(rows[dy][dx])
    return windows


def _on_gpu(offsets: Offsets, *tensors: Tensor) -> tuple[ModuleType, tuple[int, int]] | None:
    """The GPU's kernels (``models.window_products_triton``) and the offsets' grid, where they take these tensors and
    offsets; None: the tensor ops below."""
    if not tensors[0].is_cuda:
        return None
    from . import window_products_triton as kernels  # imported on a GPU only: Triton comes with torch's CUDA wheels

    grid = kernels.grid_of(offsets)
    return (kernels, grid) if grid is not None and kernels.fits(*tensors) else None


def _on_cpu(*tensors: Tensor) -> ModuleType | None:
    """The CPU's compiled loops (``models.window_products_numba``), where they take these tensors; None: the tensor
    ops (``dots_reference`` and its kin)."""
    if not numba_installed():
        return None
    from . import window_products_numba as loops

    return loops if loops.fits(*tensors) else None


def _dots(a: Tensor, padded: Tensor, offsets: Offsets) -> Tensor:
    """(B, K, h, w): per offset k, the channel sum of ``a`` (B, C, h, w) times window k of ``padded``."""
    if a.shape[0] >= padded.shape[0] and (gpu := _on_gpu(offsets, a, padded)) is not None:
        return gpu[0].dots(a, padded, *gpu[1])
    if (cpu := _on_cpu(a, padded)) is not None:
        return cpu.dots(a, padded, offsets)
    return dots_reference(a, padded, offsets)


def _mix(weights: Tensor, padded: Tensor, offsets: Offsets) -> Tensor:
    """(B, C, h, w): the sum over offsets k of window k of ``padded`` (B, C, ...) times ``weights[:, k]``."""
    if (gpu := _on_gpu(offsets, weights, padded)) is not None:
        return gpu[0].mix(weights, padded, *gpu[1])
    if (cpu := _on_cpu(weights, padded)) is not None:
        return cpu.mix(weights, padded, offsets)
    return mix_reference(weights, padded, offsets)


def _spread(weights: Tensor, a: Tensor, padded_shape: torch.Size, offsets: Offsets) -> Tensor:
    """The adjoint of reading the windows: each offset's ``weights[:, k]`` times ``a``, added back where window k
    lies, in one padded-size tensor."""
    if weights.shape[0] == a.shape[0] == padded_shape[0]:
        if (gpu := _on_gpu(offsets, weights, a)) is not None:
            return gpu[0].spread(weights, a, padded_shape, *gpu[1])
        if (cpu := _on_cpu(weights, a)) is not None:
            return cpu.spread(weights, a, padded_shape, offsets)
    return spread_reference(weights, a, padded_shape, offsets)


def dots_reference(a: Tensor, padded: Tensor, offsets: Offsets) -> Tensor:
    """``_dots`` in tensor ops: where neither device's kernels take the tensors, and what those are checked against."""
    b, _, h, w = a.shape
    out = a.new_empty(b, len(offsets), h, w)
    for k_out, window in zip(out.unbind(1), _windows(padded, h, w, offsets), strict=True):
        torch.sum(a * window, 1, out=k_out)
    return out


def mix_reference(weights: Tensor, padded: Tensor, offsets: Offsets) -> Tensor:
    """``_mix`` in tensor ops."""
    h, w = weights.shape[-2:]
    windows, per_offset = _windows(padded, h, w, offsets), weights.unsqueeze(2).unbind(1)
    out = windows[0] * per_offset[0]
    for window, weight in zip(windows[1:], per_offset[1:], strict=True):
        out.addcmul_(window, weight)
    return out


def spread_reference(weights: Tensor, a: Tensor, padded_shape: torch.Size, offsets: Offsets) -> Tensor:
    """``_spread`` in tensor ops."""
    h, w = a.shape[-2:]
    out = a.new_zeros(padded_shape)
    for (dy, dx), weight in zip(offsets, weights.unsqueeze(2).unbind(1), strict=True):
        # One slice per window, not ``_windows``' views: those all live in one view whose elements overlap, and
        # ``torch.compile`` refuses to write through such a view.
        out[..., dy : dy + h, dx : dx + w].addcmul_(weight, a)
    return out


class _WindowProduct(torch.autograd.Function):
    """``_dots`` (``first`` is a tensor to correlate) or ``_mix`` (``first`` holds the weights): the backward of each
    is the other, for ``first``, and ``_spread``, for ``padded``."""

    @staticmethod
    def forward(ctx: FunctionCtx, first: Tensor, padded: Tensor, offsets: Offsets, dots: bool) -> Tensor:
        ctx.save_for_backward(first, padded)
        ctx.offsets, ctx.dots = offsets, dots
        return (_dots if dots else _mix)(first, padded, offsets)

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, grad: Tensor) -> tuple[Tensor | None, Tensor | None, None, None]:
        first, padded = ctx.saved_tensors
        grad_first = (_mix if ctx.dots else _dots)(grad, padded, ctx.offsets) if ctx.needs_input_grad[0] else None
        weights, a = (grad, first) if ctx.dots else (first, grad)
        grad_padded = _spread(weights, a, padded.shape, ctx.offsets) if ctx.needs_input_grad[1] else None
        return grad_first, grad_padded, None, None


# The same products as ``torch.library`` custom ops, for ``torch.compile``: Dynamo cannot trace ``_dots``' writes into
# strided slices of one output (a graph break at every cost volume), while a custom op is one node of the graph whose
# fake kernel gives its shape, and inductor calls the kernels above as they are (the same numbers as eagerly). Eager
# calls keep ``_WindowProduct``: the custom op's dispatch costs more per call (about 0.2 ms against 0.07 ms for a
# small product's forward and backward on this CPU), and a step makes dozens of them.
#: The custom ops' namespace.
LIBRARY = "overtime"


def _flat(offsets: Offsets) -> list[int]:
    """Offsets as a custom op takes them (a flat list of ints: row, column, row, column, ...)."""
    return [v for offset in offsets for v in offset]


def _pairs(flat: list[int]) -> Offsets:
    return tuple(zip(flat[::2], flat[1::2], strict=True))


@torch.library.custom_op(f"{LIBRARY}::window_product", mutates_args=())
def window_product_op(first: Tensor, padded: Tensor, offsets: list[int], dots: bool) -> Tensor:
    """``_dots`` or ``_mix`` (``dots``) of ``first`` with the windows of ``padded`` at ``offsets`` (``_flat``)."""
    return (_dots if dots else _mix)(first, padded, _pairs(offsets)).contiguous()


@window_product_op.register_fake
def _window_product_shape(first: Tensor, padded: Tensor, offsets: list[int], dots: bool) -> Tensor:
    h, w = first.shape[-2:]
    dtype = torch.result_type(first, padded)
    if dots:
        return first.new_empty(first.shape[0], len(offsets) // 2, h, w, dtype=dtype)
    return first.new_empty(torch.broadcast_shapes((*padded.shape[:-2], h, w), (first.shape[0], 1, h, w)), dtype=dtype)


@torch.library.custom_op(f"{LIBRARY}::window_spread", mutates_args=())
def window_spread_op(weights: Tensor, a: Tensor, padded_shape: list[int], offsets: list[int]) -> Tensor:
    """``_spread``: the adjoint of reading the windows, as a custom op (the custom ops' backward)."""
    return _spread(weights, a, torch.Size(padded_shape), _pairs(offsets))


@window_spread_op.register_fake
def _window_spread_shape(weights: Tensor, a: Tensor, padded_shape: list[int], offsets: list[int]) -> Tensor:
    return a.new_empty(padded_shape)


def _save_product(ctx: FunctionCtx, inputs: tuple, output: Tensor) -> None:
    first, padded, offsets, dots = inputs
    ctx.save_for_backward(first, padded)
    ctx.offsets, ctx.dots = offsets, dots


def _product_backward(ctx: FunctionCtx, grad: Tensor) -> tuple[Tensor | None, Tensor | None, None, None]:
    """``_WindowProduct.backward`` in custom ops, so that a compiled backward holds them as graph nodes too."""
    first, padded = ctx.saved_tensors
    grad_first = window_product_op(grad, padded, ctx.offsets, not ctx.dots) if ctx.needs_input_grad[0] else None
    weights, a = (grad, first) if ctx.dots else (first, grad)
    grad_padded = window_spread_op(weights, a, list(padded.shape), ctx.offsets) if ctx.needs_input_grad[1] else None
    return grad_first, grad_padded, None, None


window_product_op.register_autograd(_product_backward, setup_context=_save_product)


def _product(first: Tensor, padded: Tensor, offsets: Offsets, dots: bool) -> Tensor:
    """The custom op while Dynamo traces, ``_WindowProduct`` otherwise (see ``window_product_op``)."""
    if torch.compiler.is_compiling():
        return window_product_op(first, padded, _flat(offsets), dots)
    return _WindowProduct.apply(first, padded, offsets, dots)


def window_dots(a: Tensor, padded: Tensor, offsets: Offsets) -> Tensor:
    """(B, K, h, w): per offset k, the dot product over channels of ``a`` (B, C, h, w) with the window of ``padded``
    (B, C, H, W) that starts at ``offsets[k]``."""
    return _product(a, padded, tuple(offsets), True)


def window_mix(weights: Tensor, padded: Tensor, offsets: Offsets) -> Tensor:
    """(B, C, h, w): the windows of ``padded`` (B, C, H, W) at ``offsets``, weighted per pixel by ``weights``
    (B, K, h, w) and summed."""
    return _product(weights, padded, tuple(offsets), False)
