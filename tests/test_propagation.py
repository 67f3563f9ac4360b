"""Propagation: a fast mover's motion spread over the background around it is taken back; other flows stay."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from models.flow_loss import warp
from models.propagation import FlowPropagation, backward_flow

H, W = 96, 128
TOP, LEFT, SIDE, SPEED = 32, 40, 32, 24  # a square mover, moving SPEED px to the right


def texture(seed: int) -> torch.Tensor:
    """Blobs of 8-16 px, as a camera sees: the layer compares the frames on the coarsest level's 8 px grid."""
    image = torch.rand(1, 3, H // 8, W // 8, generator=torch.Generator().manual_seed(seed))
    return F.interpolate(image, size=(H, W), mode="bilinear", align_corners=False)


def mover_pair() -> tuple[torch.Tensor, torch.Tensor]:
    """A textured square moving over a still textured background, each in colours of its own (a hand before
    leaves): where no flow explains a pixel, colour tells which surface it belongs to."""
    background = texture(0) * torch.tensor([0.4, 1.0, 0.4]).view(1, 3, 1, 1)
    mover = texture(1) * torch.tensor([1.0, 0.4, 0.4]).view(1, 3, 1, 1)
    prev, cur = background.clone(), background.clone()
    square = mover[..., TOP : TOP + SIDE, LEFT : LEFT + SIDE]
    prev[..., TOP : TOP + SIDE, LEFT : LEFT + SIDE] = square
    cur[..., TOP : TOP + SIDE, LEFT + SPEED : LEFT + SPEED + SIDE] = square
    return prev, cur


def halo_around_the_square() -> torch.Tensor:
    """The flow as a coarse level leaves it: the square's motion also on the background 8 px around it and over
    all the background it will cover."""
    halo = torch.zeros(1, 2, H, W)
    halo[:, 0, TOP - 8 : TOP + SIDE + 8, LEFT - 8 : LEFT + SIDE + SPEED] = SPEED
    return halo


def test_a_movers_halo_is_taken_back_and_the_mover_keeps_its_motion():
    """The square's corners keep their motion too, though the window around a corner is mostly background."""
    prev, cur = mover_pair()
    out = FlowPropagation()(torch.cat([halo_around_the_square(), prev, cur], 1))
    flow = out[:, :2]
    assert torch.equal(out[:, 2:], torch.cat([prev, cur], 1))
    inside = flow[:, 0, TOP : TOP + SIDE, LEFT : LEFT + SIDE]
    assert (inside - SPEED).abs().max() < 1e-4
    above, below = (
        flow[..., TOP - 8 : TOP, LEFT - 8 : LEFT + SIDE],
        flow[..., TOP + SIDE : TOP + SIDE + 8, LEFT - 8 : LEFT + SIDE],
    )
    left = flow[..., TOP : TOP + SIDE, LEFT - 8 : LEFT]
    for band in (above, below, left):
        assert band.abs().mean() < 0.1 * SPEED


def test_the_background_a_mover_covers_takes_its_flow_back_by_the_forward_backward_test():
    """No flow of the previous frame's background explains where the square arrives (it is covered), so the
    photometric test leaves the halo there; the forward-backward test finds it, and it takes the still background's
    flow, the neighbour most like it in colour. Most of it: next to the square the block matching's window of 3
    cells still sees the square, whose motion the flow back then has too, and so passes the halo there."""
    prev, cur = mover_pair()
    x = torch.cat([halo_around_the_square(), prev, cur], 1)
    covered = (slice(None), 0, slice(TOP, TOP + SIDE), slice(LEFT + SIDE + 8, LEFT + SIDE + SPEED))
    assert FlowPropagation()(x)[covered].abs().mean() < 0.2 * SPEED
    assert FlowPropagation(rounds=0)(x)[covered].min() == SPEED  # the premise: the photometric test keeps it


def test_the_flow_back_by_block_matching_finds_a_shift_of_whole_cells():
    prev = texture(3)[..., ::8, ::8]  # one value per cell
    cur = torch.roll(prev, shifts=(1, -2), dims=(-2, -1))  # cur(y, x) = prev(y - 1, x + 2)
    back = backward_flow(prev, cur, radius=3, window=3)
    assert torch.equal(back[0, :, 2:-2, 3:-3], torch.tensor([2.0, -1.0]).view(2, 1, 1).expand(2, 8, 10))


def test_flows_within_a_pixel_of_each_other_never_swap():
    """A slow mover's flow varies by fractions of a pixel across it: swapping such values trades noise for noise.
    Here the picture moved 0.9 px and the left half's flow says 0: its neighbours' 0.9 explains it far better."""
    prev = texture(2)
    shift = torch.zeros(1, 2, H, W)
    shift[:, 0] = -0.9
    cur = warp(prev, shift)  # cur(x) = prev(x - 0.9)
    flow = torch.zeros(1, 2, H, W)
    flow[:, 0, :, W // 2 :] = 0.9
    x = torch.cat([flow, prev, cur], 1)
    assert torch.equal(FlowPropagation()(x), x)
    assert not torch.equal(FlowPropagation(apart=0.0)(x), x)  # the premise: without the rule they would swap


def test_a_flat_picture_keeps_whatever_flow_it_has():
    """Where any flow explains the pair, no neighbour's explains it clearly better."""
    flat = torch.full((1, 3, H, W), 0.5)
    flow = torch.zeros(1, 2, H, W)
    flow[:, 1, :, : W // 2] = 12.0
    x = torch.cat([flow, flat, flat], 1)
    assert torch.equal(FlowPropagation()(x), x)


def test_the_gradient_reaches_the_flow_and_not_the_frames():
    prev, cur = mover_pair()
    flow = halo_around_the_square().requires_grad_()
    frames = torch.cat([prev, cur], 1).requires_grad_()
    FlowPropagation()(torch.cat([flow, frames], 1))[:, :2].sum().backward()
    assert flow.grad is not None and torch.isfinite(flow.grad).all() and flow.grad.abs().sum() > 0
    assert frames.grad is None or frames.grad.abs().sum() == 0
