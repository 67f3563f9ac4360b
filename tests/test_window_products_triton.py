"""The window products' Triton kernels (``models.window_products_triton``), checked on a CPU: run in Triton's
interpreter against the tensor ops (``models.window_products``), and compiled for a Hopper GPU without one. On a GPU
the products themselves, forward and backward, are compared with the CPU's (the CUDA test at the end)."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import pytest
import torch
from triton_support import compile_for_hopper, interpreted

from models import window_products
from models.correlation import local_correlation
from models.flow_cleanup import _offsets, neighbour_sum

triton = pytest.importorskip("triton", reason="Triton is not installed (it comes with the test extra on Linux x86-64)")


@pytest.fixture
def kernels(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    yield from interpreted("models.window_products_triton", monkeypatch)


def _grid(n: int, step: int) -> tuple[tuple[int, int], ...]:
    return tuple((i * step, j * step) for i in range(n) for j in range(n))


def test_the_offsets_of_both_uses_are_grids_and_others_are_not():
    from models import window_products_triton

    assert window_products_triton.grid_of(_grid(9, 1)) == (9, 1)  # a cost volume of radius 4
    assert window_products_triton.grid_of(_offsets(8)) == (3, 8)  # the fill's neighbours at dilation 8
    assert window_products_triton.grid_of(((0, 0), (0, 2), (2, 0))) is None
    assert window_products_triton.grid_of(((0, 0), (0, 1), (1, 1), (1, 0))) is None  # a grid out of order


# (channels, n, step, batch of a or weights, batch of padded): a cost volume's features (the kernels loop over
# channels one by one: four test that loop as well as 16, which took four times the interpreter's time), the fill's
# flow at a dilation, and one image's tensor serving a batch of two either way.
CASES = [(4, 5, 1, 2, 2), (2, 3, 4, 2, 2), (3, 3, 2, 1, 2), (4, 3, 1, 2, 1)]


@pytest.mark.parametrize(("channels", "n", "step", "batch", "padded_batch"), CASES)
def test_the_kernels_compute_what_the_tensor_ops_do(kernels, channels, n, step, batch, padded_batch):
    g = torch.Generator().manual_seed(channels + n + step)
    h, w = 7, 11  # odd, and not a multiple of the kernels' block
    pad = (n - 1) * step
    offsets = _grid(n, step)
    a = torch.randn(batch, channels, h, w, generator=g)
    weights = torch.randn(batch, n * n, h, w, generator=g)
    padded = torch.randn(padded_batch, channels, h + pad, w + pad + 1, generator=g)  # wider than the windows need
    if batch >= padded_batch:  # (the tensor ops' dots take one image's padded tensor for many, not the other way)
        torch.testing.assert_close(kernels.dots(a, padded, n, step), window_products.dots_reference(a, padded, offsets))
    torch.testing.assert_close(
        kernels.mix(weights, padded, n, step), window_products.mix_reference(weights, padded, offsets)
    )
    if batch == padded_batch:
        spread = kernels.spread(weights, a, padded.shape, n, step)
        torch.testing.assert_close(spread, window_products.spread_reference(weights, a, padded.shape, offsets))


def test_the_kernels_compile_for_a_hopper_gpu():
    """The three kernels go through Triton's whole compiler for sm_90, ptxas included, without a GPU, with the options
    every launch takes: no fused multiply-add (``models.triton_launch``)."""
    from models import window_products_triton as kernels

    ints = {"channels", "h", "w", "height", "width", "n", "step", "a_batch", "padded_batch", "weights_batch"}
    for kernel in (kernels._dots_kernel, kernels._mix_kernel, kernels._spread_kernel):
        asm = compile_for_hopper(kernel, ints, set(), {"BLOCK": kernels.BLOCK})
        assert asm["cubin"] and "fma.rn.f32" not in asm["ptx"]  # each product rounded on its own, as on the CPU


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.cuda
def test_on_a_gpu_the_products_and_their_gradients_are_the_cpus():
    """The cost volume and the fill's neighbour sum, forward and backward, on CUDA (one kernel per product) against
    the same on the CPU (one compiled loop nest per product, ``models.window_products_numba``)."""
    g = torch.Generator().manual_seed(0)
    f0, f1 = torch.randn(2, 16, 12, 16, generator=g), torch.randn(2, 16, 12, 16, generator=g)
    flow, kernel = torch.randn(2, 2, 12, 16, generator=g), torch.rand(2, 9, 12, 16, generator=g)

    def run(device: str) -> list[torch.Tensor]:
        inputs = [t.to(device).requires_grad_() for t in (f0, f1, flow, kernel)]
        volume = local_correlation(inputs[0], inputs[1], 3)
        mixed = neighbour_sum(inputs[2], inputs[3], 4)
        (volume.square().sum() + mixed.square().sum()).backward()
        return [t.detach().cpu() for t in (volume, mixed, *(i.grad for i in inputs))]

    for on_gpu, on_cpu in zip(run("cuda"), run("cpu"), strict=True):
        torch.testing.assert_close(on_gpu, on_cpu, rtol=1e-4, atol=1e-4)
