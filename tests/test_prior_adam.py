"""PriorAdam against plain Adam by hand (the sequential reference): its rates set before each step for the warm-up, its
weights pulled toward their start after each step for the anchor."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from models.online import KNOWN_MOTION, PRIOR_ANCHOR, PRIOR_WARMUP, flow_optimizer
from models.prior_adam import PriorAdam

WARMUP, LR, SCALE = 5, 1e-2, 30.0


def _net() -> nn.Module:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(2, 3, 3), nn.Conv2d(3, 1, 1))
    net.register_parameter("prior", nn.Parameter(torch.tensor(0.5)))  # a scalar prior, in the fast group
    return net


def _groups(net: nn.Module) -> list[dict]:
    """The flow nets' two groups: the convolutions at LR; the prior SCALE times faster, warmed up."""
    weights = [p for p in net.parameters() if p.dim() > 0]
    return [
        {"params": weights, "lr": LR},
        {"params": [net.prior], "lr": LR * SCALE, "lr_scale": SCALE, "warmup": WARMUP},
    ]


def _train(net: nn.Module, optimizer: torch.optim.Optimizer, steps: range, by_hand: bool = False) -> None:
    """``by_hand``: plain Adam, the prior's rate set before each step as the warm-up would set it."""
    for step in steps:
        if by_hand:
            optimizer.param_groups[1]["lr"] = LR * SCALE * min(1.0, (step + 1) / WARMUP)
        optimizer.zero_grad()
        x = torch.randn(1, 2, 6, 6, generator=torch.Generator().manual_seed(step))
        (net(x) * net.prior).square().mean().backward()
        optimizer.step()


@pytest.mark.parametrize("fused", [True, False])
def test_each_step_is_plain_adams_at_its_share_of_the_rate(fused):
    warm, plain = _net(), _net()
    warming = PriorAdam(_groups(warm), lr=LR, betas=(0.9, 0.99), fused=fused or None)
    by_hand = torch.optim.Adam(_groups(plain), lr=LR, betas=(0.9, 0.99), fused=fused or None)
    _train(warm, warming, range(2 * WARMUP))
    _train(plain, by_hand, range(2 * WARMUP), by_hand=True)
    for (name, a), b in zip(warm.named_parameters(), plain.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7, msg=name)
    # What a state dict saves and set_lr sets is the full rate, not this step's share of it.
    assert [g["lr"] for g in warming.param_groups] == [LR, LR * SCALE]


def test_it_warms_up_again_from_fresh_moments_and_not_after_a_resume():
    net = _net()
    fresh = PriorAdam(_groups(net), lr=LR)
    initial = copy.deepcopy(fresh.state_dict())
    _train(net, fresh, range(WARMUP))
    resumed_net = copy.deepcopy(net)
    resumed = PriorAdam(_groups(resumed_net), lr=LR)
    resumed.load_state_dict(copy.deepcopy(fresh.state_dict()))  # Adam's load keeps the tensors it is given
    # Resumed with its moments: full steps at once, as the optimizer it was saved from takes them.
    _train(net, fresh, range(WARMUP, WARMUP + 3))
    _train(resumed_net, resumed, range(WARMUP, WARMUP + 3))
    for a, b in zip(net.parameters(), resumed_net.parameters(), strict=True):
        torch.testing.assert_close(a, b)
    # Sent back to its initial state (no moments): its first step is again a 1/WARMUP share.
    fresh.load_state_dict(initial)
    before = net.prior.detach().clone()
    _train(net, fresh, range(1))
    assert (net.prior - before).abs().item() == pytest.approx(LR * SCALE / WARMUP, rel=1e-3)


def test_the_anchor_pulls_back_toward_the_start_after_each_step():
    """Each step: plain Adam, then the prior moved lr * anchor of the way back to where it was before the first step;
    the start is saved with the moments and a resumed optimizer pulls toward it, not toward where it resumed."""
    anchor = 1.0  # each step 30 % of the way back (lr * anchor = 0.3)
    held, plain = _net(), _net()
    start = plain.prior.detach().clone()
    groups = _groups(held)
    del groups[1]["warmup"]
    anchored = PriorAdam([*groups[:1], groups[1] | {"anchor": anchor}], lr=LR)
    by_hand = torch.optim.Adam(_groups(plain), lr=LR)
    by_hand.param_groups[1].pop("warmup")
    for step in range(6):
        _train(held, anchored, range(step, step + 1))
        _train(plain, by_hand, range(step, step + 1))
        with torch.no_grad():
            plain.prior.lerp_(start, LR * SCALE * anchor)
        torch.testing.assert_close(held.prior, plain.prior, rtol=1e-6, atol=1e-7)
    assert not torch.equal(held.prior.detach(), start)  # it learned, held near its start
    for (name, a), b in zip(held.named_parameters(), plain.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7, msg=name)  # the unanchored group: plain Adam
    resumed_net = copy.deepcopy(held)
    resumed = PriorAdam([*_groups(resumed_net)[:1], _groups(resumed_net)[1] | {"anchor": anchor}], lr=LR)
    resumed.load_state_dict(copy.deepcopy(anchored.state_dict()))
    _train(held, anchored, range(6, 9))
    _train(resumed_net, resumed, range(6, 9))
    torch.testing.assert_close(held.prior, resumed_net.prior)
    torch.testing.assert_close(resumed.state[resumed_net.prior]["start"], start)
    # An anchor so strong that a step's share would pass 1 holds the prior at its start (no overshoot).
    frozen = _net()
    strong = PriorAdam([*_groups(frozen)[:1], _groups(frozen)[1] | {"anchor": 100.0}], lr=LR)
    _train(frozen, strong, range(3))
    assert frozen.prior.item() == start.item()


def test_the_known_motion_learner_warms_up_its_priors_and_anchors_them():
    net = _net()
    assert type(flow_optimizer(1e-3)(net.parameters())) is torch.optim.Adam
    optimizer = KNOWN_MOTION.optimizer()(net.parameters())
    assert isinstance(optimizer, PriorAdam)
    assert [(g.get("warmup"), g.get("anchor")) for g in optimizer.param_groups] == [
        (None, None),
        (PRIOR_WARMUP, PRIOR_ANCHOR),
    ]
    groups = _groups(net)
    with pytest.raises(ValueError, match="at least one step"):
        PriorAdam([groups[0], groups[1] | {"warmup": 0}], lr=LR)
    with pytest.raises(ValueError, match="toward the start"):
        PriorAdam([groups[0], groups[1] | {"anchor": -1.0}], lr=LR)
