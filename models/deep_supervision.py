"""Deep supervision inside an ``nn.Sequential``: a layer adds the gradient of a loss of its own.

Why: an intermediate flow estimate of a coarse-to-fine net is a prediction in its own right, and
training each coarse level on its own photometric loss (multi-scale supervision, as in PWC-Net)
gives it a direct learning signal. In a PARTIME pipeline that matters more: the gradient a stage
receives from the stages after it is 2(D-1-h) frames old, while a loss attached inside the stage is
backpropagated with the frame it has just processed. A layer of an ``nn.Sequential`` cannot return a
loss, so :func:`supervise` attaches it to the layer's output: the output is unchanged, and in the
backward pass the loss receives the gradient ``weight``, exactly as if ``weight * loss`` had been added
to the objective. The schedules and runtimes need not know (the loss travels inside the graph).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor


class _AttachLoss(torch.autograd.Function):
    @staticmethod
    def forward(ctx, output: Tensor, loss: Tensor, weight: float) -> Tensor:
        ctx.weight = weight
        return output.view_as(output)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, Tensor, None]:
        return grad, grad.new_full((), ctx.weight), None


def supervise(output: Tensor, loss: Callable[[], Tensor], weight: float) -> Tensor:
    """``output``, with ``weight * loss()`` joining the objective of whatever backpropagates through it.

    The loss is only computed when a backward can follow (grad mode on, ``output`` in a graph)."""
    if weight == 0 or not torch.is_grad_enabled() or not output.requires_grad:
        return output
    return _AttachLoss.apply(output, loss(), weight)
