"""Adam with the warm-up the nets' scalar priors need online.

Why a warm-up: Adam's first steps are each a whole rate, whatever the gradient (its second moment has seen one or two
gradients), and a learner that starts from the shipped weights moves its scalar priors ``PRIOR_SCALE`` times faster
than its convolutions. Over a real clip's first pairs those first full steps moved the still gate before the gradients
said anything steady: box's first 30 pairs 1.09x its frozen start's error over all pixels, Big Buck Bunny's 1.10x;
with the priors warmed up over 100 steps 1.01x (the convolutions warmed up too bought nothing more and cost more of
the exact-flow gains: ``docs/notebook/2026-11-29-warming-up-the-priors.md``).

The warm-up reads Adam's own step count, so it starts again exactly when the moments do (a fresh optimizer, a learner
sent back to its initial weights) and not when a checkpoint with moments is resumed. The share it reads stays a tensor
on the parameters' device, so a CUDA graph that captures the step keeps warming up.
"""

from __future__ import annotations

import torch
from torch import Tensor


class PriorAdam(torch.optim.Adam):
    """``torch.optim.Adam`` with an optional entry in a parameter group, ``warmup`` (steps): the group moves its weights
    at ``min(1, t / warmup)`` times its rate on its step ``t`` (from 1). ``group["lr"]`` stays the full rate (what
    ``Stage.set_lr`` sets and a state dict saves)."""

    def add_param_group(self, param_group: dict) -> None:
        warmup = param_group.get("warmup")
        if warmup is not None and warmup < 1:
            raise ValueError(f"warmup={warmup}: a warm-up lasts at least one step")
        super().add_param_group(param_group)

    @torch.no_grad()
    def step(self, closure=None):  # noqa: ANN001, ANN201 (torch.optim's signature)
        full = [group["lr"] for group in self.param_groups]
        for group in self.param_groups:
            if group.get("warmup") is not None:
                group["lr"] = group["lr"] * self._share(group)
        try:
            return super().step(closure)
        finally:
            for group, lr in zip(self.param_groups, full, strict=True):
                group["lr"] = lr

    def _share(self, group: dict) -> Tensor | float:
        """The share of the full rate this step takes: the group's step count (Adam's, before it counts this one)
        plus one, over its ``warmup``, at most 1. The count is that of the group's first parameter that has stepped
        (a parameter without a gradient yet has no state)."""
        warmup = group["warmup"]
        counts = (self.state[p]["step"] for p in group["params"] if "step" in self.state.get(p, {}))
        step = next(counts, None)
        if step is None:
            return 1.0 / warmup
        if not isinstance(step, Tensor):
            return min(1.0, (step + 1) / warmup)
        return torch.clamp((step + 1) / warmup, max=1.0)
