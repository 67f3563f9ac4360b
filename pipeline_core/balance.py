"""Balance stages: profile every layer, then split contiguously minimising the slowest stage.

A PARTIME step lasts as long as its slowest stage, so the split that matters minimises the
*maximum* stage cost, where a stage's cost is its layers' forward + backward + update time plus
the cost of shipping its output forward and its input gradient backward. The split is solved
exactly by dynamic programming (torchgpipe's greedy solver can miss the optimum: costs
[1, 1, 1, 1, 10] into 2 stages is [4, 1], not [2, 3]). A layer can ask to share a stage with the
next one (:func:`~pipeline_core.partition.keeps_with_next`); the solver never cuts there, like the
split points of ``torch.distributed.pipelining``.
"""

from __future__ import annotations

import copy
import statistics
import time
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from .partition import check_sequential, keeps_with_next, only_shown, resolve_devices
from .stage import LossFn

#: Bytes per second assumed for a transfer between two stages on the same CPU (a memcpy).
CPU_COPY_BANDWIDTH = 5e9


def solve(
    costs: Sequence[float],
    stages: int,
    transfer: Sequence[float] | None = None,
    uncut: frozenset[int] = frozenset(),
) -> list[int]:
    """Exact min-max contiguous split of ``costs`` into ``stages`` groups (layer counts).

    ``transfer[i]`` is the cost of crossing the boundary after layer i (paid by both stages it
    separates: activation forward, gradient backward); ``uncut`` holds the layers after which no
    stage may end. Of equally good splits, the one with the earliest cuts (see ``_earliest_cuts``).
    """
    n = len(costs)
    if stages < 1:
        raise ValueError(f"stages must be >= 1, got {stages}")
    if stages > n:
        raise ValueError(f"{stages} stages requested, but the model has only {n} layers")
    transfer = list(transfer) if transfer is not None else [0.0] * n
    cuttable = n - 1 - len({i for i in uncut if 0 <= i < n - 1})
    if stages - 1 > cuttable:
        raise ValueError(f"{stages} stages requested, but the model allows only {cuttable + 1} (layers kept together)")
    prefix = [0.0]
    for c in costs:
        prefix.append(prefix[-1] + float(c))

    def stage_cost(i: int, j: int) -> float:  # layers i..j-1
        cost = prefix[j] - prefix[i]
        if i > 0:
            cost += transfer[i - 1]
        if j < n:
            cost += transfer[j - 1]
        return cost

    inf = float("inf")
    # best[k][j]: minimal max-cost of splitting the first j layers into k stages.
    best = [[inf] * (n + 1) for _ in range(stages + 1)]
    best[0][0] = 0.0
    for k in range(1, stages + 1):
        for j in range(k, n - (stages - k) + 1):
            for i in range(k - 1, j):
                if i == 0 or i - 1 not in uncut:
                    best[k][j] = min(best[k][j], max(best[k - 1][i], stage_cost(i, j)))
    return _earliest_cuts(n, stages, best[stages][n], stage_cost, uncut)


def _earliest_cuts(n: int, stages: int, bound: float, stage_cost, uncut: frozenset[int]) -> list[int]:
    """Among the splits whose slowest stage costs at most ``bound``, the one whose every cut comes
    earliest. Why this tie-break: it is deterministic (equal costs never leave the choice to the
    order of a loop), and it puts the fewest layers in the first stages, whose gradients are the
    most delayed under PARTIME."""
    # fits[k][i]: layers i..n-1 split into k stages, none over the bound.
    fits = [[False] * (n + 1) for _ in range(stages + 1)]
    fits[0][n] = True
    for k in range(1, stages + 1):
        for i in range(n - 1, -1, -1):
            fits[k][i] = any(
                fits[k - 1][j] and stage_cost(i, j) <= bound
                for j in range(i + 1, n + 1)
                if j == n or j - 1 not in uncut
            )
    counts, start = [], 0
    for k in range(stages, 0, -1):
        end = next(
            j
            for j in range(start + 1, n + 1)
            if (j == n or j - 1 not in uncut) and stage_cost(start, j) <= bound and fits[k - 1][j]
        )
        counts.append(end - start)
        start = end
    return counts


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time(fn, device: torch.device, repeats: int) -> float:
    fn()  # warm-up (allocations, kernel selection)
    samples = []
    for _ in range(repeats):
        samples.append(_time_once(fn, device))
    return statistics.median(samples)


def _time_once(fn, device: torch.device) -> float:
    _sync(device)
    start = time.perf_counter()
    fn()
    _sync(device)
    return time.perf_counter() - start


def profile(
    model: nn.Sequential,
    sample_input: Tensor,
    device: torch.device,
    loss_fn: LossFn | None,
    rounds: int = 5,
    shown: int = 0,
) -> tuple[list[float], list[int], frozenset[int]]:
    """Per layer: seconds of forward + backward (+ an update-sized write), output bytes, and the layers after which a
    stage cannot end (the shown and the learned samples' outputs differ in shape there). Each sample goes through as
    a stage's would (``stage.forward_samples``): the first ``shown`` in inference mode, the rest with a graph, by the
    layers only shown samples pass.

    Every layer is timed once per round, rounds interleaved, and keeps its fastest: on a shared
    machine a burst of other load only ever slows a sample down, and interleaving spreads a burst
    over all layers instead of inflating one (which would skew the split)."""
    layers = [copy.deepcopy(m).to(device) for m in model]
    x = sample_input.to(device)
    seen, learned = x[:shown], x[shown:]
    steps, sizes, apart = [], [], set()
    for i, layer in enumerate(layers):
        inp = learned.detach().requires_grad_(i > 0)
        params = [p for p in layer.parameters() if p.requires_grad]
        learn = loss_fn is not None
        passes = not (shown and only_shown(layer))  # the learned samples pass this layer

        def step(layer=layer, seen=seen, inp=inp, params=params, learn=learn, passes=passes) -> None:
            if shown:
                with torch.inference_mode():
                    layer(seen)
            out = layer(inp) if passes else inp
            if learn and passes and out.requires_grad:
                torch.autograd.backward(out, torch.ones_like(out))
                with torch.no_grad():
                    for p in params:  # an update touches every weight once more
                        if p.grad is not None:
                            p.grad.mul_(0.0)
                    if inp.grad is not None:
                        inp.grad = None

        step()  # warm-up (allocations, kernel selection)
        steps.append(step)
        with torch.no_grad():
            seen = layer(seen) if shown else seen
            learned = layer(learned) if passes else learned
        sizes.append(sum(t.numel() * t.element_size() for t in (seen, learned)))
        if shown and seen.shape[1:] != learned.shape[1:]:
            apart.add(i)
    costs = [float("inf")] * len(steps)
    for _ in range(rounds):
        for i, step in enumerate(steps):
            costs[i] = min(costs[i], _time_once(step, device))
    return costs, sizes, frozenset(apart)


def balance(
    model: nn.Sequential,
    sample_input: Tensor,
    stages: int,
    devices: list[str | torch.device] | None = None,
    loss_fn: LossFn | None = None,
    shown: int = 0,
) -> list[int]:
    """Layer counts per stage that minimise the slowest stage's time, transfers included, never
    cutting after a layer that keeps with the next, nor where the shown samples' and the others' outputs differ in
    shape (``profile``, which runs the ``shown`` leading samples as the stages will)."""
    model = check_sequential(model)
    if stages > len(model):
        raise ValueError(f"{stages} stages requested, but the model has only {len(model)} layers")
    device = resolve_devices(devices)[0]
    costs, sizes, apart = profile(model, sample_input, device, loss_fn, shown=shown)
    bandwidth = _bandwidth(device)
    transfer = [size / bandwidth for size in sizes]
    uncut = apart | {i for i, layer in enumerate(model) if keeps_with_next(layer)}
    return solve(costs, stages, transfer, uncut)


def _bandwidth(device: torch.device) -> float:
    """Measured device-to-device copy bandwidth (bytes/s), so transfers are priced honestly."""
    if device.type != "cuda":
        return CPU_COPY_BANDWIDTH
    buf = torch.empty(64 << 20, dtype=torch.uint8, device=device)
    other = torch.empty_like(buf)
    seconds = _time(lambda: other.copy_(buf), device, 3)
    return buf.numel() / max(seconds, 1e-9)
