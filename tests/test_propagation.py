"""Propagation: a fast mover's motion spread over the background around it is taken back; other flows stay."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from models.flow_loss import warp
from models.propagation import FlowPropagation

H, W = 96, 128
TOP, LEFT, SIDE, SPEED = 32, 40, 32, 24  # a square mover, moving SPEED px to the right


def texture(seed: int) -> torch.Tensor:
    """Blobs of 8-16 px, as a camera sees: the layer compares the frames on the coarsest level's 8 px grid."""
    image = torch.rand(1, 3, H // 8, W // 8, generator=torch.Generator().manual_seed(seed))
    return F.interpolate(image, size=(H, W), mode="bilinear", align_corners=False)


def mover_pair() -> tuple[torch.Tensor, torch.Tensor]:
    """A textured square moving over a still textured background."""
    background, mover = texture(0), texture(1)
    prev, cur = background.clone(), background.clone()
    square = mover[..., TOP : TOP + SIDE, LEFT : LEFT + SIDE]
    prev[..., TOP : TOP + SIDE, LEFT : LEFT + SIDE] = square
    cur[..., TOP : TOP + SIDE, LEFT + SPEED : LEFT + SPEED + SIDE] = square
    return prev, cur


def test_a_movers_halo_is_taken_back_and_the_mover_keeps_its_motion():
    """The flow as a coarse level leaves it: the square's motion also on the background 8 px around it. The square's
    corners keep their motion too, though the window around a corner is mostly background."""
    prev, cur = mover_pair()
    halo = torch.zeros(1, 2, H, W)
    halo[:, 0, TOP - 8 : TOP + SIDE + 8, LEFT - 8 : LEFT + SIDE + 8] = SPEED
    out = FlowPropagation()(torch.cat([halo, prev, cur], 1))
    flow = out[:, :2]
    assert torch.equal(out[:, 2:], torch.cat([prev, cur], 1))
    inside = flow[:, 0, TOP : TOP + SIDE, LEFT : LEFT + SIDE]
    assert (inside - SPEED).abs().max() < 1e-4
    # the background the square leaves or never covers (not where it arrives, which no flow of the
    # previous frame's background matches): back to still
    above, below = (
        flow[..., TOP - 8 : TOP, LEFT - 8 : LEFT + SIDE],
        flow[..., TOP + SIDE : TOP + SIDE + 8, LEFT - 8 : LEFT + SIDE],
    )
    left = flow[..., TOP : TOP + SIDE, LEFT - 8 : LEFT]
    for band in (above, below, left):
        assert band.abs().mean() < 0.1 * SPEED


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
    halo = torch.zeros(1, 2, H, W)
    halo[:, 0, TOP - 8 : TOP + SIDE + 8, LEFT - 8 : LEFT + SIDE + 8] = SPEED
    flow = halo.requires_grad_()
    frames = torch.cat([prev, cur], 1).requires_grad_()
    FlowPropagation()(torch.cat([flow, frames], 1))[:, :2].sum().backward()
    assert flow.grad is not None and torch.isfinite(flow.grad).all() and flow.grad.abs().sum() > 0
    assert frames.grad is None or frames.grad.abs().sum() == 0
