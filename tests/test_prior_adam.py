"""PriorAdam against plain Adam by hand (the sequential reference): its rates set before each step for the warm-up."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from models.online import KNOWN_MOTION, PRIOR_WARMUP, flow_optimizer
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


def test_the_known_motion_learner_warms_up_its_priors():
    net = _net()
    assert type(flow_optimizer(1e-3)(net.parameters())) is torch.optim.Adam
    optimizer = KNOWN_MOTION.optimizer()(net.parameters())
    assert isinstance(optimizer, PriorAdam)
    assert [g.get("warmup") for g in optimizer.param_groups] == [None, PRIOR_WARMUP]
    groups = _groups(net)
    with pytest.raises(ValueError, match="at least one step"):
        PriorAdam([groups[0], groups[1] | {"warmup": 0}], lr=LR)
