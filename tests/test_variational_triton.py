"""The variational refinement's Triton kernels (``models.variational_triton``), checked on a CPU: run in Triton's
interpreter against the tensor-op reference, and compiled for a Hopper GPU (PTX and a cubin, by the ptxas that comes
with Triton) so that a kernel no GPU could build fails here, not on a lent machine. On a GPU the refined flow itself
is compared with the CPU's (the CUDA test at the end)."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import pytest
import torch
from triton_support import compile_for_hopper, interpreted
from variational_support import solver_problem

from models import variational
from models.variational_energy import ENERGY

triton = pytest.importorskip("triton", reason="Triton is not installed (it comes with the test extra on Linux x86-64)")


@pytest.fixture
def kernels(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    yield from interpreted("models.variational_triton", monkeypatch)


@pytest.mark.parametrize(("batch", "height", "width", "gated"), [(1, 24, 32, False), (2, 23, 31, True)])
def test_the_kernels_solve_as_the_tensor_ops_do(kernels, batch, height, width, gated):
    """Odd sizes too (a checkerboard whose rows start on alternating colours), a batch with a gate's decision per
    image; the same increment to float32's rounding (the kernels fuse multiply-adds the tensor ops round apart)."""
    flow, terms, inside = solver_problem(batch, height, width, gated, seed=batch)
    reference = variational.solve_reference(flow, terms, inside, 5, 5)
    solved = kernels.solve(flow, terms, inside, 5, 5, ENERGY)
    assert reference.abs().max() > 0.5  # it does move the flow
    torch.testing.assert_close(solved, reference, rtol=1e-4, atol=1e-4)


def test_one_inside_map_serves_every_image_of_a_batch(kernels):
    """Without a gate ``inside`` is one map (1, 2, H, W) for the whole batch, as ``refine_flow`` passes it."""
    flow, terms, inside = solver_problem(2, 16, 20, gated=False, seed=3)
    reference = variational.solve_reference(flow, terms, inside, 2, 3)
    solved = kernels.solve(flow, terms, inside[:1], 2, 3, ENERGY)
    torch.testing.assert_close(solved, reference, rtol=1e-4, atol=1e-4)


def test_a_flow_cut_from_a_wider_tensor_is_solved_as_a_contiguous_one(kernels):
    """The refinement hands over ``x[:, :2]`` of the layers' tensor: for a batch of two, not contiguous."""
    flow, terms, inside = solver_problem(2, 12, 14, gated=True, seed=4)
    wide = torch.cat([flow, torch.randn(2, 3, 12, 14)], 1)[:, :2]
    assert not wide.is_contiguous()
    reference = variational.solve_reference(flow, terms, inside, 2, 2)
    solved = kernels.solve(wide, terms, inside, 2, 2, ENERGY)
    torch.testing.assert_close(solved, reference, rtol=1e-4, atol=1e-4)


def test_the_kernels_compile_for_a_hopper_gpu():
    """Both kernels go through Triton's whole compiler for sm_90 (H100, H200), ptxas included, without a GPU, with the
    options every launch takes: no fused multiply-add (``models.triton_launch``), and divisions and roots rounded as
    IEEE rounds them (Triton's plain ones are approximate on a GPU: they moved refined pixels there)."""
    from models import variational_triton

    ints = {"h", "w", "inside_batch", "colour"}
    floats = {"alpha_half", "delta_half", "gamma_half", "eps2", "floor", "omega"}
    for kernel in (variational_triton._systems, variational_triton._half_sweep):
        asm = compile_for_hopper(kernel, ints, floats, {"BLOCK": 256})
        assert asm["cubin"] and "fma.rn.f32" not in asm["ptx"]  # each product rounded on its own, as on the CPU
        assert not any(approximate in asm["ptx"] for approximate in ("div.full.f32", "div.approx", "sqrt.approx"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.cuda
@pytest.mark.parametrize("gated", [False, True])
def test_on_a_gpu_the_refined_flow_is_the_cpus(gated):
    """The refinement on CUDA (the custom op's Triton kernels) against the same refinement on the CPU (its compiled
    loops, ``models.variational_numba``)."""
    g = torch.Generator().manual_seed(0)
    prev, cur = torch.rand(2, 3, 48, 64, generator=g), torch.rand(2, 3, 48, 64, generator=g)
    flow = torch.randn(2, 2, 48, 64, generator=g)
    keep = (torch.rand(2, 1, 48, 64, generator=g) > 0.3).float() if gated else None
    on_cpu = variational.refine_flow(flow, prev, cur, keep=keep)
    cuda = [t.cuda() if t is not None else None for t in (flow, prev, cur, keep)]
    on_gpu = variational.refine_flow(*cuda[:3], keep=cuda[3]).cpu()
    torch.testing.assert_close(on_gpu, on_cpu, rtol=1e-3, atol=1e-3)
