"""The window products compiled for the CPU (``models.window_products_numba``) against the tensor-op reference, and
their gradients through ``window_dots`` and ``window_mix``."""

from __future__ import annotations

import pytest
import torch

from models import window_products, window_products_numba
from models.window_products import window_dots, window_mix


def _offsets(n: int, step: int) -> tuple[tuple[int, int], ...]:
    return tuple((i * step, j * step) for i in range(n) for j in range(n))


# (channels, n, step, batch of a or weights, batch of padded, dtype): a cost volume's features, the fill's flow at a
# dilation, one image's tensor serving a batch of two either way, and float64 (a gradient check's).
CASES = [
    (16, 5, 1, 2, 2, torch.float32),
    (2, 3, 4, 2, 2, torch.float32),
    (3, 3, 2, 1, 2, torch.float32),
    (4, 3, 1, 2, 1, torch.float32),
    (3, 2, 3, 2, 2, torch.float64),
]


@pytest.mark.parametrize(("channels", "n", "step", "batch", "padded_batch", "dtype"), CASES)
def test_the_loops_compute_what_the_tensor_ops_do(channels, n, step, batch, padded_batch, dtype):
    g = torch.Generator().manual_seed(channels + n + step)
    h, w = 7, 11
    pad = (n - 1) * step
    offsets = _offsets(n, step)
    a = torch.randn(batch, channels, h, w, generator=g, dtype=dtype)
    weights = torch.randn(batch, n * n, h, w, generator=g, dtype=dtype)
    padded = torch.randn(padded_batch, channels, h + pad, w + pad + 1, generator=g, dtype=dtype)  # wider than needed
    loops, reference = window_products_numba, window_products
    if batch >= padded_batch:
        torch.testing.assert_close(loops.dots(a, padded, offsets), reference.dots_reference(a, padded, offsets))
    torch.testing.assert_close(loops.mix(weights, padded, offsets), reference.mix_reference(weights, padded, offsets))
    if batch == padded_batch:
        spread = loops.spread(weights, a, padded.shape, offsets)
        torch.testing.assert_close(spread, reference.spread_reference(weights, a, padded.shape, offsets))


def test_the_gradients_through_the_loops_match_finite_differences():
    """``window_dots`` and ``window_mix`` on the CPU run the loops forward and backward (their adjoints)."""
    g = torch.Generator().manual_seed(0)
    offsets = _offsets(3, 2)
    a = torch.randn(2, 3, 5, 6, generator=g, dtype=torch.float64, requires_grad=True)
    weights = torch.randn(2, 9, 5, 6, generator=g, dtype=torch.float64, requires_grad=True)
    padded = torch.randn(2, 3, 9, 10, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, p: window_dots(x, p, offsets), (a, padded))
    assert torch.autograd.gradcheck(lambda k, p: window_mix(k, p, offsets), (weights, padded))


def test_tensors_the_loops_do_not_take_get_the_tensor_ops():
    """Half precision, or two types at once: the reference, whose result types torch decides."""
    a, padded = torch.randn(1, 2, 4, 5).bfloat16(), torch.randn(1, 2, 6, 7).bfloat16()
    offsets = _offsets(3, 1)
    assert not window_products_numba.fits(a, padded)
    assert not window_products_numba.fits(a.float(), padded.double())
    assert torch.equal(window_products._dots(a, padded, offsets), window_products.dots_reference(a, padded, offsets))


def test_without_numba_the_products_and_the_solver_run_as_tensor_ops(monkeypatch):
    """A GPU machine that carries only some of the service's wheels may lack Numba: its CPU work goes on."""
    from variational_support import solver_problem

    from models import variational

    monkeypatch.setattr(window_products, "numba_installed", lambda: False)  # the name each module reads
    monkeypatch.setattr(variational, "numba_installed", lambda: False)
    a, padded, offsets = torch.randn(1, 2, 4, 5), torch.randn(1, 2, 6, 7), _offsets(3, 1)
    assert torch.equal(window_products._dots(a, padded, offsets), window_products.dots_reference(a, padded, offsets))
    flow, terms, inside = solver_problem(1, 8, 10, gated=False, seed=6)
    solved = variational.variational_solve(flow, terms, inside, 2, 2)
    assert torch.equal(solved, variational.solve_reference(flow, terms, inside, 2, 2))


def test_warming_compiles_every_loop_a_learner_on_the_cpu_runs():
    """``cpu_loops.warm`` (a learner's process on CPU, before its stage processes fork) leaves each loop compiled."""
    from models import cpu_loops, variational_numba

    cpu_loops.warm()
    loops = (window_products_numba._dots, window_products_numba._mix, window_products_numba._spread)
    assert all(loop.signatures for loop in (*loops, variational_numba._solve))
