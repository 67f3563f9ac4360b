"""The variational refinement's energy and solver weights (DIS's): what ``models.variational`` minimises, and what each
kernel of its solver (the tensor ops, ``models.variational_triton``, ``models.variational_numba``) is handed. A module
of its own so that the kernels' modules and the refinement's read the same numbers without importing one another."""

from __future__ import annotations

from typing import NamedTuple

#: Weights of the energy (DIS's, with intensities in 0-255): smoothness, brightness constancy, gradient constancy.
ALPHA, DELTA, GAMMA = 20.0, 5.0, 10.0
#: The normalisation's floor (a gradient this small counts as none) and the robust penalties' epsilon.
ZETA, EPSILON = 0.1, 0.001
#: Over-relaxation of the SOR sweeps.
OMEGA = 1.6
#: A floor on the 2x2 systems' diagonal. Where the still gate's decision cuts a pixel off from all four neighbours on a
#: flat patch (a saturated sky, a letterbox bar), nothing constrains it: no data, no smoothness, a singular system
#: whose solve is NaN, and a NaN flow costs the learner a restore. With the floor its increment is zero. Far below
#: what a connected pixel has (a smoothness edge weighs ALPHA / 2 over the flow's jump along it: 0.25 at 40 px); on
#: the real clips' frames the refined flow moved by 0.03 px at most with it (exploratory).
DIAGONAL_FLOOR = 1e-3


class Energy(NamedTuple):
    """The energy's and the solver's weights as the solver's kernels take them: smoothness, brightness constancy,
    gradient constancy, the robust penalties' epsilon, the over-relaxation and the floor on the systems' diagonal."""

    alpha: float
    delta: float
    gamma: float
    epsilon: float
    omega: float
    floor: float


#: The weights every kernel of ``variational_solve`` is handed.
ENERGY = Energy(ALPHA, DELTA, GAMMA, EPSILON, OMEGA, DIAGONAL_FLOOR)
