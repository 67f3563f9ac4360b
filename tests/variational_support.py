"""Shared by the tests of the variational refinement's solver kernels (Triton's, Numba's): a problem as
``models.variational.refine_flow`` hands it to the solver."""

from __future__ import annotations

import torch

from models import variational


def solver_problem(batch: int, height: int, width: int, gated: bool, seed: int) -> tuple[torch.Tensor, ...]:
    """A flow, the image terms of two random frames and the edges' ``inside`` (cut by a random still gate's decision
    where ``gated``), as ``refine_flow`` hands them to the solver."""
    g = torch.Generator().manual_seed(seed)
    prev, cur = torch.rand(batch, 3, height, width, generator=g), torch.rand(batch, 3, height, width, generator=g)
    flow = 2 * torch.randn(batch, 2, height, width, generator=g)
    inside, _ = variational._grid(height, width, flow)
    if gated:
        inside = inside * variational._same_side((torch.rand(batch, 1, height, width, generator=g) > 0.3).float())
    return flow, variational.image_terms(flow, prev, cur), inside.contiguous()
