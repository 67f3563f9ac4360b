"""Balancing: the exact min-max split, and profiling that sees real layer costs."""

from __future__ import annotations

import itertools

import pytest
import torch
from sleep_layers import Sleep
from torch import nn

from pipeline_core import balance
from pipeline_core.balance import profile, solve

pytestmark = pytest.mark.realtime


def brute_force(costs, stages, transfer, uncut=frozenset()):
    """Every allowed contiguous split, scored like the solver: the slowest stage, transfers included. Splits come
    in lexicographic order of their cuts and only a strictly better one replaces the best: of equally good splits,
    the one with the earliest cuts wins."""
    n, best = len(costs), None
    for cuts in itertools.combinations([c for c in range(1, n) if c - 1 not in uncut], stages - 1):
        bounds = (0, *cuts, n)
        worst = max(
            sum(costs[i:j]) + (transfer[i - 1] if i > 0 else 0) + (transfer[j - 1] if j < n else 0)
            for i, j in itertools.pairwise(bounds)
        )
        if best is None or worst < best[0]:
            best = (worst, [j - i for i, j in itertools.pairwise(bounds)])
    return best


def test_exact_split_beats_greedy():
    assert solve([1, 1, 1, 1, 10], 2) == [4, 1]


@pytest.mark.parametrize("seed", range(20))
def test_solver_is_optimal(seed):
    gen = torch.Generator().manual_seed(seed)
    n = int(torch.randint(2, 9, (1,), generator=gen))
    stages = int(torch.randint(1, n + 1, (1,), generator=gen))
    costs = torch.rand(n, generator=gen).tolist()
    transfer = (torch.rand(n, generator=gen) * 0.5).tolist()
    split = solve(costs, stages, transfer)
    assert sum(split) == n and len(split) == stages and min(split) >= 1
    bounds = list(itertools.accumulate([0, *split]))
    worst = max(
        sum(costs[i:j]) + (transfer[i - 1] if i > 0 else 0) + (transfer[j - 1] if j < n else 0)
        for i, j in itertools.pairwise(bounds)
    )
    assert worst == pytest.approx(brute_force(costs, stages, transfer)[0])


@pytest.mark.parametrize("seed", range(20))
def test_ties_go_to_the_split_with_the_earliest_cuts(seed):
    # Small whole costs tie often, and sum exactly in floating point.
    gen = torch.Generator().manual_seed(seed)
    n = int(torch.randint(3, 9, (1,), generator=gen))
    costs = torch.randint(1, 4, (n,), generator=gen).tolist()
    uncut = frozenset(int(i) for i in torch.randperm(n - 1, generator=gen)[:1])
    for stages in range(1, n - len(uncut) + 1):
        assert solve(costs, stages, uncut=uncut) == brute_force(costs, stages, [0] * n, uncut)[1]
    assert solve([1, 10, 10, 1], 2, uncut=frozenset({1})) == [1, 3]


def test_transfer_cost_moves_the_cut():
    # Without transfers the even split wins; a costly boundary after layer 2 pushes the cut away.
    assert solve([1, 1, 1, 1], 2) == [2, 2]
    assert solve([1, 1, 1, 1], 2, transfer=[0, 5, 0, 0]) != [2, 2]


@pytest.mark.parametrize("seed", range(10))
def test_solver_never_cuts_after_a_layer_that_keeps_with_next(seed):
    gen = torch.Generator().manual_seed(seed)
    n = int(torch.randint(4, 9, (1,), generator=gen))
    costs = torch.rand(n, generator=gen).tolist()
    uncut = frozenset(int(i) for i in torch.randperm(n - 1, generator=gen)[:2])
    for stages in range(1, n - len(uncut) + 1):
        split = solve(costs, stages, uncut=uncut)
        ends = set(itertools.accumulate(split[:-1]))  # a stage ending after layer i ends at count i + 1
        assert not {i + 1 for i in uncut} & ends
        assert max(sum(costs[i:j]) for i, j in itertools.pairwise([0, *itertools.accumulate(split)])) == (
            pytest.approx(brute_force(costs, stages, [0.0] * n, uncut)[0])
        )
    with pytest.raises(ValueError, match="kept together"):
        solve(costs, n - len(uncut) + 1, uncut=uncut)


def test_more_stages_than_layers_is_refused():
    with pytest.raises(ValueError, match="only 3 layers"):
        solve([1, 1, 1], 4)


def test_profiling_balances_sleeping_layers():
    model = nn.Sequential(*[Sleep(0.004) for _ in range(4)], Sleep(0.04))
    loss = lambda out, _: out.sum()  # noqa: E731
    assert balance(model, torch.ones(2), 2, loss_fn=loss) == [4, 1]
    model = nn.Sequential(Sleep(0.03), *[Sleep(0.005) for _ in range(6)])
    assert balance(model, torch.ones(2), 2) == [1, 6]


def test_balance_keeps_marked_layers_with_the_next():
    model = nn.Sequential(Sleep(0.002), Sleep(0.02), Sleep(0.02), Sleep(0.002))
    assert balance(model, torch.ones(2), 2) == [2, 2]
    model[1].keep_with_next = True  # e.g. where a stage boundary hurts learning
    # [1, 3] and [3, 1] cost the same, so measurement noise picks one (ties between exact costs: the test above).
    assert balance(model, torch.ones(2), 2) in ([1, 3], [3, 1])


class ShownSleep(Sleep):
    """A last touch to what is shown (``only_shown``): the samples learned from go by it."""

    only_shown = True


class Marked(Sleep):
    """Appends a channel for the shown samples (a decision the next layer reads and drops)."""

    only_shown = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, x[:, :1]], 1) * super().forward(torch.ones(()))


class TakeThree(Sleep):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x[:, :3])


def test_a_layer_only_shown_samples_pass_costs_their_forward_alone():
    """A batch of one shown and one learned sample: each plain layer runs twice, the last one only for the shown
    sample; counted twice, it would pull the cut to [3, 1]."""
    model = nn.Sequential(Sleep(0.01), Sleep(0.01), Sleep(0.01), ShownSleep(0.03))
    assert balance(model, torch.ones(2, 3), 2, shown=1) == [2, 2]


def test_no_stage_ends_where_the_shown_and_the_learned_samples_differ_in_shape():
    """Between a layer that hands the shown samples a channel more and the one that drops it, no cut: there the
    cheapest split, [2, 2], would send the next stage two shapes in one tensor."""
    model = nn.Sequential(Sleep(0.01), Marked(0.02), TakeThree(0.01), Sleep(0.01))
    _, _, apart = profile(model, torch.ones(2, 3), torch.device("cpu"), None, rounds=1, shown=1)
    assert apart == {1}
    assert balance(model, torch.ones(2, 3), 2, shown=1) in ([1, 3], [3, 1])
