"""Plain single-device implementations of the update rules of stash, hybrid, GPipe and CDP.

They share no code with ``pipeline_core``: a stage is an ``nn.Sequential`` slice with its own
optimizer (``engine_reference.slices``), and every rule is spelled out from its paper's equations.
"""

from __future__ import annotations

import copy

import torch
from engine_reference import plain_loop, slices


def stash(parts, opts, loss_fn, xs, targets):
    """Pipelined backprop with stale weights and stashed inputs. At step t stage h forwards frame
    t-h with its current weights and sends the output on; it also takes the gradient the next stage
    sent at step t-1 for frame b = t-h-2(D-1-h), recomputes the forward of b's own stored input with
    its current weights, backprops that gradient, sends the input gradient back and updates. The
    last stage forwards, takes its loss and updates on the same frame."""
    depth = len(parts)
    acts: dict[tuple[int, int], torch.Tensor] = {}  # (stage, frame) -> input received
    grads: dict[tuple[int, int], torch.Tensor] = {}  # (stage, frame) -> output gradient received
    stored: list[dict[int, torch.Tensor]] = [{} for _ in parts]
    outputs, losses = {}, {}
    for t in range(len(xs) + 2 * (depth - 1)):
        sent_acts, sent_grads = {}, {}
        for h in range(depth):
            f, b = t - h, t - h - 2 * (depth - 1 - h)
            if h == depth - 1:
                if 0 <= f < len(xs):
                    x = xs[f] if h == 0 else acts.pop((h, f))
                    leaf = x.detach().requires_grad_(h > 0)
                    out = parts[h](leaf)
                    outputs[f] = out.detach().clone()
                    loss = loss_fn(out, targets[f])
                    losses[f] = loss.item()
                    loss.backward()
                    if h > 0:
                        sent_grads[(h - 1, f)] = leaf.grad
                    opts[h].step()
                    opts[h].zero_grad()
                continue
            if 0 <= f < len(xs):
                x = xs[f] if h == 0 else acts.pop((h, f))
                stored[h][f] = x.clone()
                with torch.no_grad():
                    sent_acts[(h + 1, f)] = parts[h](x)
            if 0 <= b < len(xs):
                leaf = stored[h].pop(b).requires_grad_(h > 0)
                parts[h](leaf).backward(grads.pop((h, b)))
                if h > 0:
                    sent_grads[(h - 1, b)] = leaf.grad
                opts[h].step()
                opts[h].zero_grad()
        acts.update(sent_acts)
        grads.update(sent_grads)
    return outputs, losses


def hybrid(model, balance, make_opt, loss_fn, xs, targets, after):
    """Stash training on the first ``after`` frames (drained), then exact backprop on the rest."""
    parts = slices(model, balance)
    opts = [make_opt(p.parameters()) for p in parts]
    outputs, losses = stash(parts, opts, loss_fn, xs[:after], targets[:after])
    for t in range(after, len(xs)):
        out = xs[t]
        for part in parts:
            out = part(out)
        loss = loss_fn(out, targets[t])
        loss.backward()
        for opt in opts:
            opt.step()
            opt.zero_grad()
        outputs[t], losses[t] = out.detach().clone(), loss.item()
    return outputs, losses, parts


def stash_reference(model, balance, make_opt, loss_fn, xs, targets):
    parts = slices(model, balance)
    opts = [make_opt(p.parameters()) for p in parts]
    outputs, losses = stash(parts, opts, loss_fn, xs, targets)
    return outputs, losses, parts


def gpipe(model, make_opt, loss_fn, batches, targets):
    """GPipe computes the gradient of the whole batch: the plain training loop on batches."""
    return plain_loop(model, make_opt, loss_fn, batches, targets)


def cdp(model, balance, make_opt, loss_fn, batches, targets, version):
    """Eq. (CDP): θ_{t+1} = θ_t - γ/N Σ_i ∇f_i(θ̂_{i,t}) with N = number of stages = micro-batches,
    θ̂_{i,t} = θ_{t-1} on every stage (CDP-v1), or θ_t on stages j >= N-i+1 and θ_{t-1} on the
    others (CDP-v2); stages and micro-batches counted from 1, θ_{-1} = θ_0. For a general optimizer
    the averaged gradient is handed to its step on θ_t."""
    parts = slices(model, balance)
    opts = [make_opt(p.parameters()) for p in parts]
    n = len(parts)
    previous = copy.deepcopy(parts)  # θ_{t-1}
    outputs, losses = {}, {}
    for t, (batch, target) in enumerate(zip(batches, targets, strict=True)):
        outs, total = [], 0.0
        for i, (x, y) in enumerate(zip(batch.chunk(n), target.chunk(n), strict=True), start=1):
            out = x
            for j in range(1, n + 1):
                fresh = version == 2 and j >= n - i + 1
                out = (parts if fresh else previous)[j - 1](out)
            loss = loss_fn(out, y) / n
            loss.backward()
            outs.append(out.detach().clone())
            total += loss.item()
        outputs[t], losses[t] = torch.cat(outs), total
        for part, old in zip(parts, previous, strict=True):
            for p, q in zip(part.parameters(), old.parameters(), strict=True):
                if q.grad is not None:
                    p.grad = q.grad.clone() if p.grad is None else p.grad + q.grad
        previous = copy.deepcopy(parts)
        for opt in opts:
            opt.step()
            opt.zero_grad()
        for old in previous:
            old.zero_grad(set_to_none=True)
    return outputs, losses, parts
