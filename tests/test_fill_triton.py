"""The edge-aware fill's weights as Triton kernels (``models.fill_triton``), checked on a CPU: run in Triton's
interpreter against the tensor ops (``models.flow_cleanup``), and compiled for a Hopper GPU without one. On a GPU the
fill itself is compared with the CPU's (the CUDA test at the end)."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import pytest
import torch
from triton_support import compile_for_hopper, interpreted

from models import flow_cleanup
from models.flow_cleanup import EXPLAINS_SCALE, EdgeAwareFill, explains_window

triton = pytest.importorskip("triton", reason="Triton is not installed (it comes with the test extra on Linux x86-64)")


@pytest.fixture
def kernels(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    yield from interpreted("models.fill_triton", monkeypatch)


@pytest.mark.parametrize("dilation", [1, 8])
def test_the_colour_weights_are_the_tensor_ops(kernels, dilation):
    g = torch.Generator().manual_seed(dilation)
    image, edge = torch.rand(2, 3, 7, 11, generator=g), torch.tensor(9.9)  # odd, and not a multiple of the block
    weights = kernels.similarity(image, edge, dilation)
    torch.testing.assert_close(weights, flow_cleanup.similarity_reference(image, edge, dilation))


@pytest.mark.parametrize("dilation", [4, 8])
def test_the_explained_weights_are_the_tensor_ops(kernels, dilation):
    """Flows that leave the frame, fractional ones, and a NaN (a broken frame's): read as the warp reads them."""
    g = torch.Generator().manual_seed(dilation)
    prev, cur = torch.rand(2, 1, 9, 13, generator=g), torch.rand(2, 1, 9, 13, generator=g)
    flow = 5 * torch.randn(2, 2, 9, 13, generator=g)
    flow[0, :, 3, 4] = 40.0
    flow[1, 0, 7, 7] = float("nan")
    weights = kernels.explains(prev, cur, flow, dilation, explains_window(dilation), EXPLAINS_SCALE)
    torch.testing.assert_close(weights, flow_cleanup.explains_reference(prev, cur, flow, dilation), rtol=1e-4,
                               atol=1e-5)  # fmt: skip


def test_the_kernels_compile_for_a_hopper_gpu():
    """The three kernels go through Triton's whole compiler for sm_90, ptxas included, without a GPU, with the options
    every launch takes: no fused multiply-add (``models.triton_launch``)."""
    from models import fill_triton

    ints = {"channels", "h", "w", "dilation", "half"}
    for kernel in (fill_triton._similarity_kernel, fill_triton._errors_kernel, fill_triton._explains_kernel):
        asm = compile_for_hopper(kernel, ints, {"scale"}, {"BLOCK": fill_triton.BLOCK})
        assert asm["cubin"] and "fma.rn.f32" not in asm["ptx"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.cuda
def test_on_a_gpu_the_fill_is_the_cpus():
    """The fill with its weights as Triton kernels on CUDA against the fill on the CPU (its weights as loops)."""
    g = torch.Generator().manual_seed(0)
    x = torch.rand(2, 12, 24, 32, generator=g)
    x[:, :2] = 3 * torch.randn(2, 2, 24, 32, generator=g)
    fill = EdgeAwareFill(verified=(4, 8))
    with torch.no_grad():
        on_gpu = fill.cuda()(x.cuda()).cpu()
        on_cpu = fill.cpu()(x)
    torch.testing.assert_close(on_gpu, on_cpu, rtol=1e-4, atol=1e-4)
