"""Replicated borders that ``torch.compile`` can differentiate on CPU.

Why not ``F.pad(..., mode="replicate")`` under the compiler: inductor lays a net's intermediate tensors out
channels-last on CPU when its graph holds convolutions (its layout optimisation for oneDNN), and the padding's backward
is an ATen kernel that returns its gradient in its input's memory format, while torch's shape function for it, which
inductor plans with, says contiguous: the compiled step failed inductor's stride check ("expected size 4==4, stride
1==19200", ``bench/results/learning-step-cpu.md`` before the fix), and with the checks off it read that gradient in the
wrong order. While Dynamo traces, the padding is a ``torch.library`` custom op whose kernels are ATen's own, made
contiguous as its fake kernel says. Why ATen's kernels and not slices and a concatenation, which inductor would fuse:
those sum an edge's gradients in another order, and Adam turns the rounding of a gradient that should be zero (a
constant added to both frames' features cancels) into whole steps: the compiled twin's weights left the eager ones
after one step (``tests/test_worker.py``). Eagerly it stays ``F.pad``, without the custom op's dispatch.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import FunctionCtx

from .window_products import LIBRARY


def replicate_pad(t: Tensor, pad: Sequence[int]) -> Tensor:
    """``t`` (B, C, H, W) with its edges repeated ``pad`` = (left, right, top, bottom) times, as ``F.pad``'s
    ``replicate`` mode."""
    if torch.compiler.is_compiling():
        return replicate_pad_op(t, list(pad))
    return F.pad(t, list(pad), mode="replicate")


@torch.library.custom_op(f"{LIBRARY}::replicate_pad", mutates_args=())
def replicate_pad_op(t: Tensor, pad: list[int]) -> Tensor:
    """``F.pad``'s replicate mode, contiguous whatever ``t``'s memory format."""
    return F.pad(t, pad, mode="replicate").contiguous()


@replicate_pad_op.register_fake
def _replicate_pad_shape(t: Tensor, pad: list[int]) -> Tensor:
    left, right, top, bottom = pad
    return t.new_empty(*t.shape[:-2], t.shape[-2] + top + bottom, t.shape[-1] + left + right)


@torch.library.custom_op(f"{LIBRARY}::replicate_pad_backward", mutates_args=())
def replicate_pad_backward_op(grad: Tensor, shape: list[int], pad: list[int]) -> Tensor:
    """ATen's backward of the padding of a ``shape`` tensor: contiguous, as it follows its input's format (a new
    one, which only gives the kernel the shape), not ``grad``'s."""
    return torch.ops.aten.replication_pad2d_backward(grad, grad.new_empty(shape), pad)


@replicate_pad_backward_op.register_fake
def _replicate_pad_backward_shape(grad: Tensor, shape: list[int], pad: list[int]) -> Tensor:
    return grad.new_empty(shape)


def _keep_shape(ctx: FunctionCtx, inputs: tuple, output: Tensor) -> None:
    t, pad = inputs
    ctx.shape, ctx.pad = list(t.shape), pad


def _pad_backward(ctx: FunctionCtx, grad: Tensor) -> tuple[Tensor, None]:
    return replicate_pad_backward_op(grad, ctx.shape, ctx.pad), None


replicate_pad_op.register_autograd(_pad_backward, setup_context=_keep_shape)
