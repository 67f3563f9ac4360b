"""The variational refinement's solver compiled for the CPU (``models.variational_numba``) against the tensor-op
reference, and the refinement on the CPU running it."""

from __future__ import annotations

import pytest
import torch
from variational_support import solver_problem

from models import variational, variational_numba
from models.variational_energy import ENERGY


@pytest.mark.parametrize(("batch", "height", "width", "gated"), [(1, 24, 32, False), (2, 23, 31, True)])
def test_the_loops_solve_as_the_tensor_ops_do(batch, height, width, gated):
    """Odd sizes too (a checkerboard whose rows start on alternating colours), a batch with a gate's decision per
    image; the same increment to float32's rounding."""
    flow, terms, inside = solver_problem(batch, height, width, gated, seed=batch)
    reference = variational.solve_reference(flow, terms, inside, 5, 5)
    solved = variational_numba.solve(flow, terms, inside, 5, 5, ENERGY)
    assert reference.abs().max() > 0.5  # it does move the flow
    torch.testing.assert_close(solved, reference, rtol=1e-4, atol=1e-4)


def test_one_inside_map_serves_every_image_and_a_cut_flow_is_read_as_a_contiguous_one():
    """Without a gate ``inside`` is one map for the whole batch; the refinement hands over ``x[:, :2]`` of the layers'
    tensor, for a batch of two not contiguous."""
    flow, terms, inside = solver_problem(2, 12, 14, gated=False, seed=4)
    wide = torch.cat([flow, torch.randn(2, 3, 12, 14)], 1)[:, :2]
    assert not wide.is_contiguous()
    reference = variational.solve_reference(flow, terms, inside, 2, 3)
    solved = variational_numba.solve(wide, terms, inside[:1], 2, 3, ENERGY)
    torch.testing.assert_close(solved, reference, rtol=1e-4, atol=1e-4)


def test_the_refinement_on_the_cpu_runs_the_loops_for_float32_and_the_tensor_ops_for_float64():
    """The custom op's CPU kernel: the loops where they take the tensors (float32), the reference where not."""
    flow, terms, inside = solver_problem(1, 16, 20, gated=True, seed=5)
    by_op = variational.variational_solve(flow, terms, inside, 3, 2)
    assert torch.equal(by_op, variational_numba.solve(flow, terms, inside, 3, 2, ENERGY))
    wide = [t.double() for t in (flow, terms, inside)]
    assert not variational_numba.fits(*wide)
    assert torch.equal(variational.variational_solve(*wide, 3, 2), variational.solve_reference(*wide, 3, 2))
