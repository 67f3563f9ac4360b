"""Products of a tensor with shifted windows of a padded one, with hand-written backwards.

Two uses, each the other's adjoint: the cost volume's dot products of features with every offset of the other frame's
features (``window_dots``, ``models.correlation``), and the edge-aware fill's weighted sums of every pixel's neighbours
(``window_mix``, ``models.flow_cleanup``). The backward of either is made of the other and of ``_spread``.

Why hand-written: autograd's own backward of each shifted slice allocates and zero-fills a padded-size tensor per
offset; here every offset's share accumulates in place into one. Why loops over views and not ``unfold``: it copies
the padded tensor once per offset.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import FunctionCtx, once_differentiable

#: Where each window starts in the padded tensor, (row, column); a window has the unpadded size.
Offsets = tuple[tuple[int, int], ...]


def _dots(a: Tensor, padded: Tensor, offsets: Offsets) -> Tensor:
    """(B, K, h, w): per offset k, the channel sum of ``a`` (B, C, h, w) times window k of ``padded``."""
    b, _, h, w = a.shape
    out = a.new_empty(b, len(offsets), h, w)
    for k, (dy, dx) in enumerate(offsets):
        torch.sum(a * padded[..., dy : dy + h, dx : dx + w], 1, out=out[:, k])
    return out


def _mix(weights: Tensor, padded: Tensor, offsets: Offsets) -> Tensor:
    """(B, C, h, w): the sum over offsets k of window k of ``padded`` (B, C, ...) times ``weights[:, k]``."""
    h, w = weights.shape[-2:]
    dy, dx = offsets[0]
    out = padded[..., dy : dy + h, dx : dx + w] * weights[:, :1]
    for k, (dy, dx) in enumerate(offsets[1:], start=1):
        out.addcmul_(padded[..., dy : dy + h, dx : dx + w], weights[:, k : k + 1])
    return out


def _spread(weights: Tensor, a: Tensor, padded_shape: torch.Size, offsets: Offsets) -> Tensor:
    """The adjoint of reading the windows: each offset's ``weights[:, k]`` times ``a``, added back where window k
    lies, in one padded-size tensor."""
    h, w = a.shape[-2:]
    out = a.new_zeros(padded_shape)
    for k, (dy, dx) in enumerate(offsets):
        out[..., dy : dy + h, dx : dx + w].addcmul_(weights[:, k : k + 1], a)
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


def window_dots(a: Tensor, padded: Tensor, offsets: Offsets) -> Tensor:
    """(B, K, h, w): per offset k, the dot product over channels of ``a`` (B, C, h, w) with the window of ``padded``
    (B, C, H, W) that starts at ``offsets[k]``."""
    return _WindowProduct.apply(a, padded, tuple(offsets), True)


def window_mix(weights: Tensor, padded: Tensor, offsets: Offsets) -> Tensor:
    """(B, C, h, w): the windows of ``padded`` (B, C, H, W) at ``offsets``, weighted per pixel by ``weights``
    (B, K, h, w) and summed."""
    return _WindowProduct.apply(weights, padded, tuple(offsets), False)
