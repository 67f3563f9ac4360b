"""The edge-aware fill's neighbour weights compiled for the CPU (``models.fill_numba``) against the tensor-op
reference, and the fill with them against the fill in tensor ops."""

from __future__ import annotations

import pytest
import torch

from models import fill_numba, flow_cleanup
from models.flow_cleanup import EXPLAINS_SCALE, EdgeAwareFill


@pytest.mark.parametrize("dilation", [1, 2, 4, 8])
def test_the_colour_weights_are_the_tensor_ops(dilation):
    g = torch.Generator().manual_seed(dilation)
    image = torch.rand(2, 3, 13, 17, generator=g)
    edge = torch.tensor(9.9)
    loops = fill_numba.similarity(image, edge, dilation)
    torch.testing.assert_close(loops, flow_cleanup.similarity_reference(image, edge, dilation), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dilation", [4, 8])
def test_the_explained_weights_are_the_tensor_ops(dilation):
    """Flows that leave the frame, fractional ones, and a NaN (a broken frame's): read as the warp reads them."""
    g = torch.Generator().manual_seed(dilation)
    prev, cur = torch.rand(2, 1, 15, 19, generator=g), torch.rand(2, 1, 15, 19, generator=g)
    flow = 6 * torch.randn(2, 2, 15, 19, generator=g)
    flow[0, :, 3, 4] = 40.0
    flow[1, 0, 7, 7] = float("nan")
    window = 2 * dilation.bit_length() - 1
    loops = fill_numba.explains(prev, cur, flow, dilation, window, EXPLAINS_SCALE)
    reference = flow_cleanup.explains_reference(prev, cur, flow, dilation)
    torch.testing.assert_close(loops, reference, rtol=1e-4, atol=1e-5)


def test_the_fill_is_the_same_with_the_loops_and_with_the_tensor_ops(monkeypatch):
    g = torch.Generator().manual_seed(0)
    x = torch.rand(2, 12, 24, 32, generator=g)
    x[:, :2] = 3 * torch.randn(2, 2, 24, 32, generator=g)
    fill = EdgeAwareFill(verified=(4, 8))
    with torch.no_grad():
        loops = fill(x)
        monkeypatch.setattr(flow_cleanup, "_similarity", flow_cleanup.similarity_reference)
        monkeypatch.setattr(flow_cleanup, "_explains", flow_cleanup.explains_reference)
        torch.testing.assert_close(loops, fill(x), rtol=1e-4, atol=1e-4)


def test_a_colour_scale_that_learns_gets_the_tensor_ops():
    """Pretraining learns the fill's scales (``learn_scales``): their gradient comes from the tensor ops."""
    image, edge = torch.rand(1, 3, 6, 7), torch.tensor(9.9, requires_grad=True)
    assert flow_cleanup._kernels(image, edge) is None
    weights = flow_cleanup._similarity(image, edge, 2)
    assert weights.requires_grad
    weights.sum().backward()
    assert edge.grad is not None
    with torch.no_grad():
        assert flow_cleanup._kernels(image, edge) is fill_numba
    assert not fill_numba.fits(image.double(), edge.detach())


def test_without_numba_the_fill_runs_as_tensor_ops(monkeypatch):
    monkeypatch.setattr(flow_cleanup, "numba_installed", lambda: False)
    image = torch.rand(1, 3, 6, 7)
    edge = torch.tensor(9.9)
    assert torch.equal(flow_cleanup._similarity(image, edge, 1), flow_cleanup.similarity_reference(image, edge, 1))


def test_a_compiled_fill_calls_the_same_loops():
    """While Dynamo traces, the weights are custom ops that call the loops: the compiled fill puts out the eager
    fill's numbers (a compiled twin takes over a stream's learning), in one graph."""
    g = torch.Generator().manual_seed(1)
    x = torch.rand(1, 12, 16, 24, generator=g)
    x[:, :2] = 2 * torch.randn(1, 2, 16, 24, generator=g)
    fill = EdgeAwareFill(verified=(4, 8))
    with torch.no_grad():
        assert torch.equal(torch.compile(fill, backend="eager", fullgraph=True)(x), fill(x))
