"""The CPU's compiled loops (``models.window_products_numba``, ``models.variational_numba``, ``models.fill_numba``):
whether they can run here, and loading them before a process forks the stages that run them.

Why load them ahead: Numba compiles a loop at its first call, a few seconds on a machine's first run (then from its
cache, half a second for all); the stage processes of a learner on CPU fork from the learner's process, and there each
would pay it at its first steps, which the budget controller would read as the learning size's cost."""

from __future__ import annotations

import importlib.util
from functools import cache

import torch


@cache
def numba_installed() -> bool:
    """Whether the loops can run here. Numba is one of the service's dependencies, but a GPU machine that carries only
    some of them as wheels (docs/operations.md#gpus) may lack it: there the CPU's few products and solves run as
    tensor ops."""
    return importlib.util.find_spec("numba") is not None


def warm() -> None:
    """Every loop compiled or loaded from the cache, in this process and so in those it forks."""
    if not numba_installed():
        return
    from . import fill_numba, variational_numba, window_products_numba
    from .variational_energy import ENERGY

    offsets = ((0, 0), (0, 1), (1, 0), (1, 1))
    a, padded, weights = torch.zeros(1, 1, 2, 2), torch.zeros(1, 1, 3, 3), torch.zeros(1, 4, 2, 2)
    window_products_numba.dots(a, padded, offsets)
    window_products_numba.mix(weights, padded, offsets)
    window_products_numba.spread(weights, a, padded.shape, offsets)
    flow, terms = torch.zeros(1, 2, 2, 2), torch.ones(1, 12, 2, 2)
    variational_numba.solve(flow, terms, torch.ones(1, 2, 2, 2), 1, 1, ENERGY)
    image = torch.zeros(1, 3, 2, 2)
    fill_numba.similarity(image, torch.ones(()), 1)
    fill_numba.explains(image[:, :1], image[:, :1], flow, 1, 3, 1.0)
