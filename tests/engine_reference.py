"""Plain single-device re-implementations of the engine's schedules, written from the equations.

They share no code with ``pipeline_core``: a stage is just an ``nn.Sequential`` slice with its own
optimizer, and every step is spelled out with lists. The engine must match them.
"""

from __future__ import annotations

import copy

import torch
from torch import nn


def slices(model: nn.Sequential, balance: list[int]) -> list[nn.Sequential]:
    layers, out, start = list(model), [], 0
    for n in balance:
        out.append(copy.deepcopy(nn.Sequential(*layers[start : start + n])))
        start += n
    return out


def partime(model, balance, make_opt, loss_fn, xs, targets, lrs=None, align=None):
    """Rules 1-4: stage h at step t forwards frame t-h with current weights, backprops the gradient
    its successor sent at step t-1 through that *current* graph, then updates (with ``lrs[h]``).
    ``align(output, grad, 2)``, if given, first adjusts that gradient: it was computed on frame t-h-2."""
    parts = slices(model, balance)
    opts = [make_opt(p.parameters()) for p in parts]
    for opt, lr in zip(opts, lrs or [], strict=False):
        for group in opt.param_groups:
            group["lr"] = lr
    depth = len(parts)
    act_in = [None] * depth  # what each stage received at the previous step
    grad_in = [None] * depth
    outputs, losses = {}, {}
    for t in range(len(xs) + depth - 1):
        act_in[0] = xs[t] if t < len(xs) else None
        next_act, next_grad = [None] * depth, [None] * depth
        for h in range(depth):
            x = act_in[h]
            if x is None:
                continue
            frame = t - h
            leaf = x.detach().requires_grad_(h > 0)
            out = parts[h](leaf)
            if h < depth - 1:
                next_act[h + 1] = out.detach().clone()
            else:
                outputs[frame] = out.detach().clone()
            if h == depth - 1:
                loss = loss_fn(out, targets[frame])
                losses[frame] = loss.item()
                loss.backward()
            elif grad_in[h] is not None:
                out.backward(grad_in[h] if align is None else align(out.detach(), grad_in[h], 2))
            else:
                continue  # no real gradient yet: forward only
            if h > 0:
                next_grad[h - 1] = leaf.grad
            opts[h].step()
            opts[h].zero_grad()
        act_in, grad_in = next_act, next_grad
    return outputs, losses, parts


def plain_loop(model, make_opt, loss_fn, xs, targets):
    """The ordinary training loop (= sequential schedule, = partime with one stage)."""
    model = copy.deepcopy(model)
    opt = make_opt(model.parameters())
    outputs, losses = {}, {}
    for t, x in enumerate(xs):
        opt.zero_grad()
        out = model(x)
        loss = loss_fn(out, targets[t])
        loss.backward()
        opt.step()
        outputs[t], losses[t] = out.detach().clone(), loss.item()
    return outputs, losses, model


def weights(modules) -> list[torch.Tensor]:
    return [p.detach().cpu().clone() for m in modules for p in m.parameters()]


def stage_weights(pipe) -> list[list[torch.Tensor]]:
    return [weights([s.module]) for s in pipe.stages]


def assert_every_stage_learned(before: list[list[torch.Tensor]], pipe) -> None:
    """``before``: ``stage_weights(pipe)`` taken earlier. Guards against runtimes where only some stages train."""
    for h, (old, new) in enumerate(zip(before, stage_weights(pipe), strict=True)):
        assert any(not torch.equal(a, b) for a, b in zip(old, new, strict=True)), f"stage {h} never learned"
