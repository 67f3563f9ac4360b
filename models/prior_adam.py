"""Adam with the two things the nets' scalar priors need online: a warm-up, and an anchor to where they started.

Why a warm-up: Adam's first steps are each a whole rate, whatever the gradient (its second moment has seen one or two
gradients), and a learner that starts from the shipped weights moves its scalar priors ``PRIOR_SCALE`` times faster
than its convolutions. Over a real clip's first pairs those first full steps moved the still gate before the gradients
said anything steady: box's first 30 pairs 1.09x its frozen start's error over all pixels, Big Buck Bunny's 1.10x;
with the priors warmed up over 100 steps 1.01x (the convolutions warmed up too bought nothing more and cost more of
the exact-flow gains: ``docs/notebook/2026-11-29-warming-up-the-priors.md``).

Why an anchor: the priors are a few numbers learned fast, and where the made pairs say little about them (a night
stream's noise) Adam's normalised steps walk them far from their start, a walk that grows with the stream's length:
over 1,500 pairs of a night stream the learner's error wandered to 1.02-1.03x its frozen start's. Pulled back toward
their start after each step (decoupled L2-SP: ``p += lr * anchor * (start - p)``, the pull outside Adam's
normalisation, as AdamW decays weights) the walk stays bounded, while a stream that keeps asking for other priors
still moves them, at a distance its gradient keeps paying for
(``docs/notebook/2026-12-01-the-priors-anchored-the-half-level-slower.md``).

Both read Adam's own state: the warm-up its step count, so it starts again exactly when the moments do (a fresh
optimizer, a learner sent back to its initial weights) and not when a checkpoint with moments is resumed; the anchor
its ``start`` (the weights the first step began from), saved with the moments, so a resumed stream keeps its start.
Every value they read or write stays a tensor on the parameters' device, so a CUDA graph that captures the step keeps
warming up and pulling.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class PriorAdam(torch.optim.Adam):
    """``torch.optim.Adam`` with two optional entries in a parameter group: ``warmup`` (steps): the group moves its
    weights at ``min(1, t / warmup)`` times its rate on its step ``t`` (from 1); ``anchor`` (lambda): after each step
    its weights move ``min(1, lr * anchor)`` of the way back to their start (at a rate so high that the share is 1
    they stay at their start). ``group["lr"]`` stays the full rate (what ``Stage.set_lr`` sets and a state dict
    saves)."""

    def add_param_group(self, param_group: dict) -> None:
        warmup, anchor = param_group.get("warmup"), param_group.get("anchor")
        if warmup is not None and warmup < 1:
            raise ValueError(f"warmup={warmup}: a warm-up lasts at least one step")
        if anchor is not None and anchor < 0:
            raise ValueError(f"anchor={anchor}: an anchor pulls back toward the start (>= 0)")
        super().add_param_group(param_group)

    @torch.no_grad()
    def step(self, closure=None):  # noqa: ANN001, ANN201 (torch.optim's signature)
        full = [group["lr"] for group in self.param_groups]
        starts = self._new_starts()
        for group in self.param_groups:
            if group.get("warmup") is not None:
                group["lr"] = group["lr"] * self._share(group)
        try:
            loss = super().step(closure)
        finally:
            for group, lr in zip(self.param_groups, full, strict=True):
                group["lr"] = lr
        for p, start in starts.items():
            if "step" in self.state[p]:  # Adam stepped it (it had a gradient): its start is kept from now on
                self.state[p]["start"] = start
        self._pull_back()
        return loss

    def _new_starts(self) -> dict[nn.Parameter, Tensor]:
        """The weights of anchored parameters that have no start yet, as they are before this step (Adam creates a
        parameter's state on its first step, so the start joins that state after it)."""
        return {
            p: p.detach().clone()
            for group in self.param_groups
            if group.get("anchor") is not None
            for p in group["params"]
            if "start" not in self.state.get(p, {})
        }

    def _pull_back(self) -> None:
        for group in self.param_groups:
            if group.get("anchor") is None:
                continue
            held = [p for p in group["params"] if "start" in self.state.get(p, {})]
            if held:
                share = min(1.0, group["lr"] * group["anchor"])
                torch._foreach_lerp_(held, [self.state[p]["start"] for p in held], share)

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
