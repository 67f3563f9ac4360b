"""What a gate that follows the camera gives each region in a pan: the camera's motion where the frames do not show
another (flat regions, what leaves the picture, a rolled or sheared pan), a mover's or a wall's own where they do
(``models.still_gate``).
"""

from __future__ import annotations

import torch
from image_support import textured, with_flow

from models.flow_loss import warp
from models.still_gate import StillGate


def mover_before_a_wall(door: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Frames (1, 3, 48, 48) of a textured mover over the left 34 columns moving 2 px right before a plain wall,
    with a door frame (a textured stripe at columns 40-43) or without, and that flow (the mover's)."""
    wall = torch.full((1, 3, 48, 48), 0.6)
    if door:
        wall[..., 40:44] = textured(48, 4, seed=3)
    mover = textured(48, 48)
    prev, cur = wall.clone(), wall.clone()
    prev[..., :, :34] = mover[..., :, :34]
    cur[..., :, 2:36] = mover[..., :, :34]
    flow = torch.zeros(1, 2, 48, 48)
    flow[:, 0, :, :34] = 2.0
    return prev, cur, flow


def test_a_gate_that_follows_the_camera_keeps_the_wall_still_where_its_texture_stands_still():
    """Two frames cannot tell a camera moving 2 px from a textured mover filling most of the picture before a plain
    wall, and the gate follows that motion; a door frame on the wall, standing still, says it is a mover's: beyond a
    shake (CAMERA_SHAKE_PX) the gate follows a motion only where no more than STANDING_SHARE of the texture stands
    still, so with the door the wall stays still."""
    gate = StillGate(follows_camera=True)
    prev, cur, flow = mover_before_a_wall(door=True)
    assert gate(with_flow(flow, prev, cur))[:, :2, :, 36:40].abs().max() < 1e-3
    prev, cur, flow = mover_before_a_wall(door=False)
    assert torch.allclose(gate(with_flow(flow, prev, cur))[:, 0, :, 40:], torch.tensor(2.0), atol=1e-3)


def test_a_gate_that_follows_the_camera_moves_a_flat_region_with_a_pan():
    """A pan of 6 px, far beyond a shake: nothing textured stands still, so a flat square the match could not see
    into takes the pan's motion, as a shake's does (zero before, which on pans of real frames cost flat and faint
    regions most of their motion)."""
    prev = textured(64, 64)
    prev[..., 24:40, 24:40] = 0.5
    cur = torch.roll(prev, shifts=6, dims=-1)
    flow = torch.zeros(1, 2, 64, 64)
    flow[:, 0] = 6.0
    flow[..., 26:38, 26:38] = 0.0
    followed = StillGate(follows_camera=True)(with_flow(flow, prev, cur))[:, :2]
    assert followed[:, 0, 28:36, 28:36].min() > 5.25 and followed[:, 1, 28:36, 28:36].abs().max() < 1e-3


def test_a_mover_in_a_pan_does_not_stop_the_gate_following_it():
    """A textured mover moving 2 px through a 6 px pan: standing still explains it no better than the camera does,
    so it is no evidence against the pan, and a flat square elsewhere still takes the pan's motion."""
    prev = textured(64, 64)
    prev[..., 36:52, 36:52] = 0.5
    cur = torch.roll(prev, shifts=6, dims=-1)
    cur[..., 8:28, 10:30] = prev[..., 8:28, 8:28]  # the mover, 20 px, 2 px right
    flow = torch.zeros(1, 2, 64, 64)
    flow[:, 0] = 6.0
    flow[:, 0, 8:28, 8:28] = 2.0
    flow[..., 38:50, 38:50] = 0.0
    out = StillGate(follows_camera=True)(with_flow(flow, prev, cur))[:, :2]
    assert out[:, 0, 40:48, 40:48].min() > 5.25
    assert torch.allclose(out[:, 0, 12:24, 12:24], torch.tensor(2.0), atol=1e-3)  # the mover keeps its motion


def test_in_a_pan_what_leaves_the_picture_takes_the_camera_s_motion():
    """A pan of 6 px: the pixels whose match leaves the picture have nothing to match, and the net leaves them a wrong
    flow (here 2 px); the camera's warp reads only padding there, so the gate judges it by its residual where it lands
    in the frame, and they take the pan's motion. A mover that stays in the picture keeps its own."""
    canvas = textured(64, 80)
    prev, cur = canvas[..., 8:72], canvas[..., 2:66]  # cur(x) = prev(x - 6)
    cur = cur.clone()
    cur[..., 20:36, 22:38] = prev[..., 20:36, 20:36]  # the mover, 16 px, 2 px right
    flow = torch.zeros(1, 2, 64, 64)
    flow[:, 0] = 6.0
    flow[:, 0, 20:36, 20:36] = 2.0
    flow[:, 0, :, 58:] = 2.0
    out = StillGate(follows_camera=True)(with_flow(flow, prev, cur))[:, :2].detach()
    assert torch.allclose(out[:, 0, 8:56, 58:], torch.tensor(6.0), atol=0.05), out[:, 0, 8:56, 58:].mean()
    assert torch.allclose(out[:, 0, 24:32, 24:32], torch.tensor(2.0), atol=1e-3)  # the mover keeps its motion


def test_in_a_pan_a_local_motion_the_frames_barely_show_takes_the_camera_s():
    """In a followed pan a region moving half a pixel more than the camera, on a smooth texture with noise of 2.5
    levels, explains its windows better than the camera's motion by less than PAN_EVIDENCE noise floors: it takes the
    camera's, the noise of a window's fit; a pixel more is evidence, and the region keeps its own."""
    for extra, expected in [(0.5, 5.0), (1.0, 6.0)]:
        flow = torch.zeros(1, 2, 64, 64)
        flow[:, 0] = 5.0
        flow[:, 0, 20:44, 20:44] += extra
        prev = textured(64, 64)
        cur = warp(prev, -flow)  # prev(x) = cur(x + flow) where the flow is locally constant
        gen = torch.Generator().manual_seed(4)
        prev, cur = (t + 0.01 * torch.randn(t.shape, generator=gen) for t in (prev, cur))
        out = StillGate(follows_camera=True)(with_flow(flow, prev, cur))[:, 0, 24:40, 24:40].detach()
        assert abs(float(out.mean()) - expected) < 0.15, (extra, float(out.mean()))


def flat_corner_error(truth: torch.Tensor) -> float:
    """The gate's largest error inside a flat square at a corner of a textured picture moved by ``truth`` (1, 2, 96,
    96), whose flow the match left at zero there: what the camera the gate follows gives it."""
    prev = textured(96, 96)
    prev[..., 70:90, 70:90] = 0.5
    cur = warp(prev, -truth)
    flow = truth.clone()
    flow[..., 72:88, 72:88] = 0.0
    out = StillGate(follows_camera=True)(with_flow(flow, prev, cur))[:, :2].detach()
    return float((out - truth)[..., 74:86, 74:86].norm(dim=1).max())


def centred_grid(size: int = 96) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, x) of every pixel from the picture's centre."""
    return torch.meshgrid(torch.arange(size) - (size - 1) / 2, torch.arange(size) - (size - 1) / 2, indexing="ij")


def test_a_pan_that_rolls_gives_a_flat_corner_its_own_motion():
    """A pan of 5 px rolling 1° (1.2 px at the corners of 96x96): the gate follows it as a similarity, so a flat
    square at a corner, whose flow the match left at zero, takes the motion it has there, not the pan's alone."""
    ys, xs = centred_grid()
    roll = torch.tensor(1.0).deg2rad()
    truth = torch.stack([5.0 + (roll.cos() - 1) * xs - roll.sin() * ys, (roll.cos() - 1) * ys + roll.sin() * xs])[None]
    assert flat_corner_error(truth) < 0.25


def test_a_pan_sheared_by_a_rolling_shutter_gives_a_flat_corner_its_own_motion():
    """A pan of 5 px whose speed changed between the frames while the rows were read one after another: the flow grows
    down the picture (0.04 px a row across, 0.02 down: 1.9 px across at the bottom corners of 96x96), which no
    similarity holds; the gate follows it as an affine map, so the flat corner takes the motion it has there."""
    ys, xs = centred_grid()
    truth = torch.stack([5.0 + 0.04 * ys + 0 * xs, 1.0 + 0.02 * ys + 0 * xs])[None]
    assert flat_corner_error(truth) < 0.25
