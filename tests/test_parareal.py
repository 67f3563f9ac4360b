"""Parareal networks: Proposition 3.1 (consistency), and that every part learns."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from models.parareal import Parareal, split_blocks

WIDTH = 8


def linear_network(blocks: int = 6):
    torch.manual_seed(0)
    pre = nn.Linear(5, WIDTH)
    body = nn.Sequential(*[nn.Linear(WIDTH, WIDTH, bias=False) for _ in range(blocks)])  # linear, not affine
    post = nn.Linear(WIDTH, 2)
    return pre, body, post


@pytest.mark.parametrize("parts", [1, 2, 3, 6])
def test_linear_network_with_coarse_equal_to_fine_is_the_original_network(parts):
    """Proposition 3.1: linear blocks and g_j = f_j give back f, whatever the interfaces C_j are
    (pre and post may be anything: they are outside the parareal part)."""
    pre, body, post = linear_network()
    fine = split_blocks(body, parts)
    # Arbitrary, even nonlinear, interfaces: their contribution cancels exactly.
    interfaces = [nn.Sequential(nn.Linear(5, WIDTH), nn.Tanh()) for _ in range(parts - 1)]
    net = Parareal(pre, fine, interfaces, coarse=fine[1:], post=post)
    x = torch.randn(7, 5, dtype=torch.float32)
    with torch.no_grad():
        want = post(body(pre(x)))
        got = net(x)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=0)


def test_nonlinear_network_is_not_recovered():
    """The proposition needs linearity: with a nonlinear block the outputs differ (the test above
    could fail)."""
    pre, body, post = linear_network()
    body = nn.Sequential(*[nn.Sequential(layer, nn.Tanh()) for layer in body])
    fine = split_blocks(body, 3)
    interfaces = [nn.Linear(5, WIDTH) for _ in range(2)]
    net = Parareal(pre, fine, interfaces, coarse=fine[1:], post=post)
    x = torch.randn(7, 5)
    with torch.no_grad():
        assert (net(x) - post(body(pre(x)))).abs().max() > 1e-3


def test_every_part_learns_and_grad_mode_reaches_the_fine_threads():
    pre, body, post = linear_network()
    fine = split_blocks(nn.Sequential(*[nn.Sequential(layer, nn.Tanh()) for layer in body]), 3)
    coarse = [nn.Linear(WIDTH, WIDTH) for _ in range(2)]
    net = Parareal.from_network(pre, nn.Sequential(*fine), post, 3, [nn.Linear(5, WIDTH) for _ in range(2)], coarse)
    parts = {"pre": net.pre, "post": net.post}
    for kind in ("fine", "interfaces", "coarse"):
        parts.update({f"{kind}.{j}": m for j, m in enumerate(getattr(net, kind))})
    before = {name: copy.deepcopy(list(m.parameters())) for name, m in parts.items()}
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    x, y = torch.randn(16, 5), torch.randn(16, 2)
    for _ in range(3):
        opt.zero_grad()
        (net(x) - y).pow(2).mean().backward()
        opt.step()
    for name, m in parts.items():
        assert any(not torch.equal(p, q) for p, q in zip(m.parameters(), before[name], strict=True)), name
    with torch.no_grad():
        assert not net(x).requires_grad


def test_wrong_parts_are_refused():
    pre, body, post = linear_network()
    with pytest.raises(ValueError, match="cannot split 6 blocks into 7"):
        split_blocks(body, 7)
    with pytest.raises(ValueError, match="need 2 interfaces"):
        Parareal(pre, split_blocks(body, 3), [], [], post)
