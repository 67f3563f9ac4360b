"""The online-learning set-up shared by the service and the bench: one frame pair, one step.

Why one module: the optimiser, its learning rate for a D-stage pipeline and the frame-pair tensor
must be identical wherever flow is learned, or bench numbers would not describe the service.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import torch
from torch import nn

OptimizerFactory = Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer]

#: Adam learning rate of a sequential (one-stage) learner. Measured on held-out ground-truth streams:
#: 4e-3 beat 1e-3 and 2e-3 for the strong net and tied 2e-3 for the fast one (both learn from scratch
#: within ~100 frames); 6e-3 was no better.
BASE_LR = 4e-3


def flow_optimizer(lr: float = BASE_LR) -> OptimizerFactory:
    """Adam factory (one optimiser per pipeline stage). beta2 = 0.99: on a non-stationary stream the
    second-moment estimate must forget within ~100 frames, or a burst of large gradients (a fast
    patch entering) keeps the step size wrong for a long time."""

    def make(params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
        return torch.optim.Adam(params, lr=lr, betas=(0.9, 0.99))

    return make


def lr_for_stages(base_lr: float, stages: int) -> float:
    """Learning rate for a D-stage PARTIME pipeline: ``base_lr / D**2``.

    Why: stage h updates with gradients that are up to D-1 frames stale (PARTIME Sec. IV), and the
    stable step size of delayed gradient descent shrinks with the delay; PARTIME lowers the rate for
    deeper pipelines. Measured with the strong flow net on a held-out 256x256 stream (150 frames,
    EPE; sequential at 4e-3: 0.75): D=2 diverged at 2.8e-3, 2e-3 and 1.5e-3 and learned at 1e-3
    (0.95) and 5e-4 (1.48); D=4 diverged at 1e-3 and reached 2.24 at 5e-4. 1/D² gives D=2 its best
    measured rate and keeps D=4 on the stable side.
    """
    if stages < 1:
        raise ValueError(f"stages must be >= 1, got {stages}")
    return base_lr / stages**2


def frame_pair(prev: np.ndarray, cur: np.ndarray, device: str | torch.device = "cpu") -> torch.Tensor:
    """Two uint8 RGB frames [H, W, 3] -> (1, 6, H, W) float tensor in [0, 1] (previous, current)."""
    prev, cur = np.asarray(prev), np.asarray(cur)
    if prev.shape != cur.shape or prev.ndim != 3 or prev.shape[2] != 3:
        raise ValueError(f"frames must both be [H, W, 3], got {prev.shape} and {cur.shape}")
    pair = np.concatenate([prev, cur], axis=2).transpose(2, 0, 1)
    return torch.from_numpy(np.ascontiguousarray(pair)).to(device=device, dtype=torch.float32).div_(255.0)[None]
