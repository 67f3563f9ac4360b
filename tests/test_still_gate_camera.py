"""The still gate's reading of the camera's motion (``models.still_gate``): a shake, a pan from the picture's
translation, what is not the camera (a noisy static camera's fitted flow, a textured mover), and a reading held from
one pair to the next.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from image_support import noisy, textured, with_flow

from models.flow_loss import warp
from models.still_gate import CAMERA_READING, StillGate


def test_a_gate_that_follows_the_camera_moves_a_flat_region_with_a_shaking_camera():
    """The whole picture moved 1 px right (a camera shaking); inside a flat square no match shows it and the flow there
    is zero. Gated to zero it stays so; following the camera it takes the camera's motion (all but the gate's
    softness at a tie, under an eighth), and the textured pixels keep theirs. Before a static camera both gates
    leave the same flow."""
    prev = textured(48, 48)
    prev[..., 16:32, 16:32] = 0.5
    cur = torch.roll(prev, shifts=1, dims=-1)
    flow = torch.zeros(1, 2, 48, 48)
    flow[:, 0] = 1.0
    flow[..., 18:30, 18:30] = 0.0  # no evidence inside the square
    still, camera = StillGate(), StillGate(follows_camera=True)
    assert still(with_flow(flow, prev, cur))[:, 0, 20:28, 20:28].abs().max() < 1e-3
    followed = camera(with_flow(flow, prev, cur))[:, :2]
    assert followed[:, 0, 20:28, 20:28].min() > 0.875 and followed[:, 1, 20:28, 20:28].abs().max() < 1e-3
    assert torch.allclose(followed[..., 2:14, 2:-2], torch.tensor([1.0, 0.0]).view(1, 2, 1, 1), atol=1e-3)

    noise = 0.05 * torch.randn(1, 2, 48, 48, generator=torch.Generator().manual_seed(1))
    assert torch.allclose(camera(with_flow(noise, prev, prev)), still(with_flow(noise, prev, prev)), atol=1e-5)


def test_a_gate_that_follows_the_camera_takes_a_biased_flow_for_no_camera_motion():
    """A net learning from scratch starts with a bias of a few tenths of a pixel everywhere; its most common flow is
    then no camera motion, since the frames, warped back by it, match worse than as they came: still is zero."""
    image = textured(48, 48)
    bias = torch.full((1, 2, 48, 48), 0.3)
    out = StillGate(follows_camera=True)(with_flow(bias, image, image))[:, :2]
    assert out.abs().max() < 1e-3


def test_the_gate_reads_the_camera_s_motion_whether_it_follows_it_or_not():
    """Its reading is what it took for the camera (here the flow's most common value), also where the frames did not
    confirm it and the flow put out stands still: what the made pairs' camera is sized by (``StreamMotion``)."""
    image = textured(48, 48)
    bias = torch.full((1, 2, 48, 48), 0.3)
    gate = StillGate(follows_camera=True)
    assert gate(with_flow(bias, image, image))[:, :2].abs().max() < 1e-3
    torch.testing.assert_close(gate.readings()[CAMERA_READING], torch.full((1, 2, 1, 1), 0.3))
    prev = textured(48, 48)
    gate(with_flow(torch.tensor([1.0, 0.0]).view(1, 2, 1, 1).expand(1, 2, 48, 48), prev, torch.roll(prev, 1, -1)))
    torch.testing.assert_close(gate.readings()[CAMERA_READING], torch.tensor([1.0, 0.0]).view(1, 2, 1, 1))
    assert StillGate().readings() == {}


def test_a_pan_over_a_mostly_flat_picture_is_taken_from_the_picture_s_translation():
    """A pan of 6 px where three quarters of the picture are flat: the net's flow is zero there, the most common value,
    but the picture's translation shows the pan, and the flat part takes it."""
    canvas = textured(64, 80)
    canvas[..., 16:, :] = 0.5
    prev, cur = canvas[..., 8:72], canvas[..., 2:66]  # cur(x) = prev(x - 6)
    flow = torch.zeros(1, 2, 64, 64)
    flow[:, 0, :16] = 6.0
    out = StillGate(follows_camera=True)(with_flow(flow, prev, cur))[:, :2].detach()
    assert out[:, 0, 24:56, 8:56].min() > 5.25 and out[:, 1, 24:56, 8:56].abs().max() < 1e-3  # as a shake's flat square


def test_a_noisy_static_camera_s_common_fitted_flow_is_not_taken_for_its_motion():
    """On a static camera's noisy frames the net's noise-fitted flow has a most common value of a few tenths of a pixel,
    which, its noise restored, explains the picture about as well as standing still: by chance a little better in a
    quarter of these pairs, and the gate then moved the still picture with it. A camera needs evidence above that."""
    flat = torch.full((1, 3, 96, 96), 0.5)
    fitted = torch.full((1, 2, 96, 96), 0.2)
    gate = StillGate(follows_camera=True)
    for seed in range(12):
        prev, cur = noisy(flat, 8, 2 * seed), noisy(flat, 8, 2 * seed + 1)
        assert gate(with_flow(fitted, prev, cur))[:, :2].abs().mean() < 0.05, seed


def test_a_textured_patch_over_a_smooth_noisy_picture_is_not_taken_for_the_camera():
    """A textured square moving (-3, 2) px over a smooth photograph drifting 0.4 px, with noise of 6 levels: the
    picture's translation is the square's, and its motion explains the frames a little better on average than the
    background's (the square's texture outweighs the smooth rest), but not by ``TRANSLATION_EVIDENCE``: the background
    is not given the square's motion, and the square keeps its own."""
    size = 96
    smooth = F.interpolate(textured(6, 6, seed=1), size=(size, size), mode="bicubic", align_corners=False)
    flow = torch.zeros(1, 2, size, size)
    flow[:, 0] = 0.4
    flow[:, 0, 30:62, 30:62], flow[:, 1, 30:62, 30:62] = -3.0, 2.0
    canvas = smooth.clone()
    canvas[..., 30:62, 30:62] = textured(32, 32, seed=2)
    prev, cur = noisy(canvas, 6, 1), noisy(warp(canvas, -flow), 6, 2)
    out = StillGate(follows_camera=True)(with_flow(flow, prev, cur))[:, :2].detach()
    background, square = out[:, :, :24, :].mean((2, 3)).flatten(), out[:, :, 36:56, 36:56].mean((2, 3)).flatten()
    assert background[0] > -0.5 and background[1].abs() < 0.5, background  # not the square's (-3, 2)
    assert torch.allclose(square, torch.tensor([-3.0, 2.0]), atol=0.05), square


def test_a_textured_mover_that_wins_the_translation_does_not_take_the_pan_s_place():
    """A pan of 1.5 px a frame over a dim, smooth picture with a textured band along its top, and a textured square
    filling a quarter of it moving (-3, 2) px, with noise of 6 levels: the square's texture wins the picture's
    translation and its motion explains the frames better on average, by more than ``TRANSLATION_EVIDENCE``, but the
    band's texture is explained by the flow's most common value (the pan) and not by the square's motion: the camera
    is the pan, the background follows it and the square keeps its own motion."""
    size, band = 96, 12
    smooth = F.interpolate(textured(6, 6, seed=1), size=(size, size), mode="bicubic", align_corners=False)
    canvas = 0.5 + 0.2 * (smooth - 0.5)
    canvas[..., :band, :] = 0.5 + 0.6 * (textured(band, size, seed=3) - 0.5)
    canvas[..., 24:72, 24:72] = textured(48, 48, seed=2)
    flow = torch.zeros(1, 2, size, size)
    flow[:, 0] = 1.5
    flow[:, 0, 24:72, 24:72], flow[:, 1, 24:72, 24:72] = -3.0, 2.0
    prev, cur = noisy(canvas, 6, 1), noisy(warp(canvas, -flow), 6, 2)
    out = StillGate(follows_camera=True)(with_flow(flow, prev, cur))[:, :2].detach()
    background, square = out[:, :, band:20, :].mean((2, 3)).flatten(), out[:, :, 30:66, 30:66].mean((2, 3)).flatten()
    assert torch.allclose(background, torch.tensor([1.5, 0.0]), atol=0.05), background  # not the square's (-3, 2)
    assert torch.allclose(square, torch.tensor([-3.0, 2.0]), atol=0.05), square


def panned_frames() -> list[torch.Tensor]:
    """Three frames of a pan of 6 px a frame over texture with a flat square the match cannot see into, and a textured
    18x18 patch standing still in the last two (a slow mover, a logo); noise of 2 levels."""
    picture = textured(64, 64)
    picture[..., 40:56, 40:56] = 0.5
    frames = [torch.roll(picture, shifts=6 * i, dims=-1) for i in range(3)]
    for frame in frames[1:]:
        frame[..., 4:22, 4:22] = textured(18, 18, seed=5)
    return [noisy(frame, 2, seed=i) for i, frame in enumerate(frames)]


def pan_flow(patch: bool) -> torch.Tensor:
    """The flow the match leaves on a pair of ``panned_frames``: the pan's, zero in the flat square and in the patch
    where it stands in both frames."""
    flow = torch.zeros(1, 2, 64, 64)
    flow[:, 0] = 6.0
    flow[..., 42:54, 42:54] = 0.0
    if patch:
        flow[..., 4:22, 4:22] = 0.0
    return flow


def test_a_pan_followed_on_the_pair_before_goes_on_past_a_patch_that_stands_still():
    """Beyond STANDING_SHARE of the texture standing still (here 5.6 %), a pan is not taken for the camera's where
    none was followed before (a door frame behind a mover); on the pair after one where it was, the camera moving
    alike, it goes on up to HELD_SHARE, so the flat square takes the pan's motion and the standing patch keeps its
    own. At night a slow textured mover stands within its noise in mid-pan. A pair that does not follow on from the
    last (its previous frame is not that pair's current one) starts afresh."""
    f0, f1, f2 = panned_frames()
    flat = (slice(None), 0, slice(44, 52), slice(44, 52))
    gate = StillGate(follows_camera=True)
    assert gate(with_flow(pan_flow(True), f1, f2))[:, :2][flat].abs().max() < 1e-3  # no pan before
    assert gate(with_flow(pan_flow(False), f0, f1))[:, :2][flat].min() > 5.25  # a pan followed
    out = gate(with_flow(pan_flow(True), f1, f2))[:, :2]
    assert out[flat].min() > 5.25
    assert out[:, :, 8:18, 8:18].abs().max() < 1e-3
    gate(with_flow(pan_flow(False), f0, noisy(f1, 2, seed=9)))  # a pan followed to another take of the frame
    assert gate(with_flow(pan_flow(True), f1, f2))[:, :2][flat].abs().max() < 1e-3


def test_the_gate_remembers_in_and_out_of_inference_mode():
    """A learner forwards the pair it shows in inference mode and other pairs outside it: what the gate keeps of the
    pair before is written in either (an inference tensor could not be written outside inference mode)."""
    f0, f1, f2 = panned_frames()
    gate = StillGate(follows_camera=True)
    with torch.inference_mode():
        gate(with_flow(pan_flow(False), f0, f1))
    assert gate(with_flow(pan_flow(True), f1, f2))[:, :2][(slice(None), 0, slice(44, 52), slice(44, 52))].min() > 5.25


def repeated_pattern_frames() -> list[torch.Tensor]:
    """Three frames of a pan of 6 px a frame over a pattern repeated every 16 px (tiles, a fence) under a faint
    textured band 8 rows tall; noise of 2 levels."""
    tile = textured(16, 16, seed=3)
    canvas = tile.repeat(1, 1, 6, 7)[..., :64, :76].clone()
    canvas[..., :8, :] = textured(8, 76, seed=4) * 0.1 + 0.45
    return [noisy(canvas[..., 12 - 6 * i : 76 - 6 * i], 2, seed=i) for i in range(3)]


def test_a_camera_read_near_the_translation_on_the_pair_before_is_read_there_again():
    """On a repeated pattern the match may land a period off (22 px where the pan is 6): that warp explains the frames
    nearly as well as the pan, the picture's translation better by less than TRANSLATION_EVIDENCE, so a fresh gate
    takes the period-off motion for the camera's. Where the camera was read near the translation on the pair before
    (the match then left the pattern still) and this pair follows on, moving alike, it is read there again, and the
    pattern takes the pan. A pair after another take of the frame starts afresh."""
    f0, f1, f2 = repeated_pattern_frames()
    before = torch.zeros(1, 2, 64, 64)
    before[:, 0, :8] = 6.0
    period_off = torch.zeros(1, 2, 64, 64)
    period_off[:, 0], period_off[:, 0, :8] = 22.0, 6.0
    pattern = (slice(None), slice(None), slice(16, 56), slice(8, 40))
    fresh = StillGate(follows_camera=True)(with_flow(period_off, f1, f2))[:, :2][pattern]
    assert torch.allclose(fresh[:, 0], torch.tensor(22.0), atol=0.05)
    gate = StillGate(follows_camera=True)
    gate(with_flow(before, f0, f1))
    held = gate(with_flow(period_off, f1, f2))[:, :2][pattern]
    assert torch.allclose(held[:, 0], torch.tensor(6.0), atol=0.05) and held[:, 1].abs().max() < 0.05
    gate(with_flow(before, f0, noisy(f1, 2, seed=9)))  # the pair before ended on another take of the frame
    assert torch.allclose(gate(with_flow(period_off, f1, f2))[:, :2][pattern][:, 0], torch.tensor(22.0), atol=0.05)
