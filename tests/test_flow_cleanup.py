"""The layers that clean a learned flow: zero where nothing moves (``models.still_gate``), filled in where nothing is
seen (``models.flow_cleanup``)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from models.flow_cleanup import (
    EdgeAwareFill,
    box_mean,
    close_gaps,
    confidence,
    neighbour_sum,
    noise_floor,
    with_noise_restored,
)
from models.flow_loss import warp
from models.still_gate import StillGate


def textured(h: int = 32, w: int = 32, seed: int = 0) -> torch.Tensor:
    image = torch.rand(1, 3, h, w, generator=torch.Generator().manual_seed(seed))
    return torch.nn.functional.avg_pool2d(image, 3, 1, 1)


def with_flow(flow: torch.Tensor, prev: torch.Tensor, cur: torch.Tensor) -> torch.Tensor:
    return torch.cat([flow, prev, cur], 1)


def test_still_gate_zeroes_a_flow_where_nothing_moved_and_keeps_the_true_one():
    image = textured()
    noise = torch.full((1, 2, 32, 32), 0.3)  # a small wrong motion on a still picture
    out = StillGate()(with_flow(noise, image, image))
    assert out[:, :2].abs().max() < 1e-3 and torch.equal(out[:, 2:], torch.cat([image, image], 1))

    moved = torch.roll(image, shifts=2, dims=-1)  # content moves 2 px right
    truth = torch.zeros(1, 2, 32, 32)
    truth[:, 0] = 2.0
    kept = StillGate()(with_flow(truth, image, moved))[:, :2]
    assert (kept[..., 4:-4, 4:-4] - truth[..., 4:-4, 4:-4]).abs().max() < 1e-2


def test_still_gate_lets_little_through_where_moving_explains_the_pair_no_better():
    """A flat picture: any flow warps it onto itself, so moving gains nothing over standing still. A soft gate that
    let a quarter of such a flow through painted the static background of real clips."""
    flat = torch.full((1, 3, 32, 32), 0.5)
    wrong = torch.full((1, 2, 32, 32), 1.0)
    out = StillGate()(with_flow(wrong, flat, flat))[:, :2]
    assert out.abs().max() < 0.125


def test_still_gate_keeps_an_imperfect_flow_where_the_frames_clearly_changed():
    """Content moved 6 px right; the flow says 6 px down, which explains the pair no better than standing still. The
    frames differ clearly, so the place is not still: the flow stays for learning to correct, not zeroed (a fast
    mover's partial match, gated, lost its motion)."""
    image = textured()
    moved = torch.roll(image, shifts=6, dims=-1)
    wrong = torch.zeros(1, 2, 32, 32)
    wrong[:, 1] = 6.0
    gate = StillGate()
    assert torch.allclose(gate(with_flow(wrong, image, moved))[:, :2], wrong, atol=1e-3)
    with torch.no_grad():
        gate.quiet.fill_(100.0)  # every window counts as quiet: the stillness test alone decides
    gate.closing = 1  # and closes none of the gaps it leaves
    assert gate(with_flow(wrong, image, moved))[:, :2].abs().mean() < 2.0


def test_close_gaps_fills_a_mover_s_narrow_holes_and_leaves_wide_still_regions_and_outlines():
    """The still gate's keep-mask after its test: a mover with specks its test gated, on a still background."""
    keep = torch.zeros(1, 1, 48, 48)
    keep[..., 10:38, 12:36] = 1.0  # the mover
    keep[..., 20:24, 20:27] = 0.0  # a 4 x 7 hole: narrower than 9 px both ways
    keep[..., 30, 14:34] = 0.0  # a one-pixel crack
    closed = close_gaps(keep, 9)
    assert closed[..., 10:38, 12:36].min() == 1.0
    outside = torch.ones_like(keep, dtype=torch.bool)
    outside[..., 10:38, 12:36] = False
    assert closed[outside].max() == 0.0  # the mover does not grow into the background
    wide = keep.clone()
    wide[..., 14:34, 16:32] = 0.0  # a still region 16 px wide inside it stays still
    assert close_gaps(wide, 9)[..., 16:32, 18:30].max() == 0.0


def test_still_gate_keeps_the_motion_of_a_flat_mover_that_its_edges_show():
    """A flat square (a palm) moves 3 px over a textured, still background: inside it any flow explains a small
    window as well as standing still, but a wide window reaches its edges, where only the motion explains the pair."""
    background = textured(48, 48)
    prev, cur = background.clone(), background.clone()
    prev[..., 14:34, 10:30] = 0.2
    cur[..., 14:34, 13:33] = 0.2
    truth = torch.zeros(1, 2, 48, 48)
    truth[:, 0, 14:34, 10:30] = 3.0
    kept = StillGate()(with_flow(truth, prev, cur))[:, :2]
    assert kept[:, 0, 18:30, 16:26].min() > 0.9 * 3.0  # the palm's inside, 6 px or more from its edges
    assert kept[:, :, 40:, :].abs().max() < 1e-3  # the background stays still


def test_confidence_is_high_on_matched_texture_and_low_on_flat_or_mismatched_pixels():
    image = textured()
    flat = torch.full_like(image, 0.5)
    zero = torch.zeros(1, 2, 32, 32)
    scales = torch.tensor(0.02), torch.tensor(0.05)
    assert confidence(zero, image, image, *scales)[..., 2:-2, 2:-2].mean() > 0.8
    assert confidence(zero, flat, flat, *scales).max() < 1e-6
    assert confidence(zero, image, torch.roll(image, 3, -1), *scales)[..., 4:-4, 4:-4].mean() < 0.5


def test_a_noisy_flat_picture_is_not_texture_to_the_fill():
    """Noise of 4 levels has a gradient about the fill's texture scale: counted as texture, a noisy flat wall's
    noise-fitted flow was kept for confident; only the gradient above the pair's noise counts."""
    flat = torch.full((1, 3, 64, 64), 0.5)
    prev, cur = noisy(flat, 4, 0), noisy(flat, 4, 1)
    scales = torch.tensor(0.02), torch.tensor(0.05)
    assert confidence(torch.zeros(1, 2, 64, 64), prev, cur, *scales).mean() < 0.1
    image = textured(64, 64)
    assert confidence(torch.zeros(1, 2, 64, 64), noisy(image, 4, 0), noisy(image, 4, 1), *scales).mean() > 0.5


def test_fill_gives_flat_pixels_the_flow_of_their_textured_neighbours():
    # Left half textured, right half flat of the same mean colour; the whole picture moves 1 px down.
    prev = torch.full((1, 3, 32, 32), 0.5)
    prev[..., :16] = textured(seed=1)[..., :16]  # mean 0.5, like the flat half
    cur = torch.roll(prev, shifts=1, dims=-2)
    truth = torch.zeros(1, 2, 32, 32)
    truth[:, 1] = 1.0
    guess = truth.clone()
    guess[..., 16:] = torch.randn(1, 2, 32, 16, generator=torch.Generator().manual_seed(2))  # noise where flat
    out = EdgeAwareFill()(with_flow(guess, prev, cur))[:, :2]
    before = (guess - truth)[..., 2:-2, 17:-2].norm(dim=1).mean()
    after = (out - truth)[..., 2:-2, 17:-2].norm(dim=1).mean()
    assert after < 0.2 * before
    assert (out - truth)[..., 2:-2, 2:14].norm(dim=1).mean() < 0.05  # the textured side keeps its flow


def test_farther_reaches_fill_the_middle_of_a_wide_flat_region_and_leave_the_rest_to_the_near_one():
    """A flat 72 px square inside a textured frame, all moving 1 px down: its middle, over 15 px from any texture, is
    out of the near reach, which has no confident flow to give it (it falls to zero); farther dilations give it the
    frame's motion, while near the texture, where the near reach has support, the fill stays as it was."""
    size, border = 96, 12
    prev = textured(size, size, seed=1)
    prev[..., border:-border, border:-border] = 0.5
    cur = torch.roll(prev, shifts=1, dims=-2)
    truth = torch.zeros(1, 2, size, size)
    truth[:, 1] = 1.0
    guess = truth.clone()
    guess[..., border:-border, border:-border] += torch.randn(1, 2, 72, 72, generator=torch.Generator().manual_seed(2))
    x = with_flow(guess, prev, cur)
    near, far = EdgeAwareFill()(x)[:, :2], EdgeAwareFill(farther=(16, 32))(x)[:, :2]
    middle = (..., slice(34, -34), slice(34, -34))
    assert (near - truth)[middle].norm(dim=1).mean() > 0.5
    assert (far - truth)[middle].norm(dim=1).mean() < 0.1
    rim = torch.zeros(size, size, dtype=torch.bool)
    rim[border - 2 : -border + 2, border - 2 : -border + 2] = True
    rim[border + 4 : -border - 4, border + 4 : -border - 4] = False  # the flat square's outer 4 px and the edge
    assert (far - near)[..., rim].norm(dim=1).mean() < 0.05


def test_a_verified_fill_keeps_the_motion_of_a_patch_among_still_neighbours_of_the_same_colours():
    """A 16 px patch of a texture moved 1 px right, the rest of the same texture stood still (a branch in the wind
    before the tree's still leaves). 60 % of the patch's flow is noise, so unsure, and colour does not tell the patch
    from its surroundings: the plain fill takes the still neighbours' confident zeros into it; verified at dilation 8,
    a neighbour's flow counts only as far as it explains the pixel, and the patch keeps its motion."""
    size = 48
    prev = textured(size, size, seed=3)
    cur = prev.clone()
    patch = (..., slice(16, 32), slice(16, 32))
    cur[patch] = torch.roll(prev, shifts=1, dims=-1)[patch]
    truth = torch.zeros(1, 2, size, size)
    truth[:, 0][patch] = 1.0
    g = torch.Generator().manual_seed(4)
    unsure = torch.rand(1, 1, size, size, generator=g) < 0.6
    guess = torch.where(unsure & (truth[:, :1] > 0), truth + 2 * torch.randn(1, 2, size, size, generator=g), truth)
    x = with_flow(guess, prev, cur)
    plain, verified = EdgeAwareFill()(x)[:, :2], EdgeAwareFill(verified=(8,))(x)[:, :2]
    core = (0, 0, slice(18, 30), slice(18, 30))
    assert plain[core].mean() < 0.75
    assert verified[core].mean() > 0.85
    assert verified[..., :12, :].abs().max() < 0.05  # the still background stays still


def test_box_mean_is_the_mean_over_the_window_with_edges_replicated():
    t = torch.rand(2, 9, 20, 27, generator=torch.Generator().manual_seed(5))
    for window in (1, 3, 7, 31):
        half = window // 2
        expected = F.avg_pool2d(F.pad(t, [half] * 4, mode="replicate"), window, 1)
        assert torch.allclose(box_mean(t, window), expected, atol=1e-5)


def test_fill_keeps_flow_from_crossing_an_edge_between_two_equally_bright_colours():
    """Green texture moving 1 px (left), a flat purple strip, purple texture standing still (right): the flat purple
    takes the still purple's flow, not the moving green's, though green and purple are equally bright (a fill guided
    by brightness alone gave the flat strip 0.40 px of the green's motion)."""
    h, w = 32, 48
    green, purple = (torch.tensor(c)[:, None, None] for c in ([0.3, 0.7, 0.5], [0.7, 0.3, 0.5]))
    texture = textured(h, w, seed=1) - 0.5
    prev = purple.expand(1, 3, h, w).clone()
    prev[..., :16] = (green + texture)[..., :16]
    prev[..., 28:] = (purple + texture)[..., 28:]
    cur = prev.clone()
    cur[..., :16] = torch.roll(prev, 1, -1)[..., :16]
    guess = torch.zeros(1, 2, h, w)
    guess[:, 0, :, :16] = 1.0
    guess[..., 16:28] = 0.5 * torch.randn(1, 2, h, 12, generator=torch.Generator().manual_seed(2))  # noise where flat
    out = EdgeAwareFill()(with_flow(guess, prev, cur))[:, :2]
    assert out[..., 2:-2, 17:27].norm(dim=1).mean() < 0.2


def test_neighbour_sum_is_the_kernel_weighted_3x3_neighbourhood_with_true_gradients():
    """The fill's weighted neighbour sum has a hand-written backward: checked against unfold's neighbourhood and
    against finite differences, for the image and for the kernel (pretraining learns the kernel's scale)."""
    gen = torch.Generator().manual_seed(1)
    for dilation in (1, 2):
        t = torch.rand(1, 2, 5, 6, generator=gen, dtype=torch.float64)
        kernel = torch.rand(1, 9, 5, 6, generator=gen, dtype=torch.float64)
        padded = F.pad(t, [dilation] * 4, mode="replicate")
        windows = F.unfold(padded, 3, dilation=dilation).view(1, 2, 9, 5, 6)
        torch.testing.assert_close(neighbour_sum(t, kernel, dilation), (windows * kernel[:, None]).sum(2))
        assert torch.autograd.gradcheck(neighbour_sum, (t.requires_grad_(), kernel.requires_grad_(), dilation))


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


def test_a_pan_that_rolls_gives_a_flat_corner_its_own_motion():
    """A pan of 5 px rolling 1° (1.2 px at the corners of 96x96): the gate follows it as a similarity, so a flat
    square at a corner, whose flow the match left at zero, takes the motion it has there, not the pan's alone."""
    size = 96
    ys, xs = torch.meshgrid(torch.arange(size) - (size - 1) / 2, torch.arange(size) - (size - 1) / 2, indexing="ij")
    roll = torch.tensor(1.0).deg2rad()
    truth = torch.stack([5.0 + (roll.cos() - 1) * xs - roll.sin() * ys, (roll.cos() - 1) * ys + roll.sin() * xs])[None]
    prev = textured(size, size)
    prev[..., 70:90, 70:90] = 0.5
    cur = warp(prev, -truth)
    flow = truth.clone()
    flow[..., 72:88, 72:88] = 0.0
    out = StillGate(follows_camera=True)(with_flow(flow, prev, cur))[:, :2].detach()
    assert (out - truth)[..., 74:86, 74:86].norm(dim=1).max() < 0.25


def test_a_gate_hands_on_its_decision_when_asked():
    image = textured()
    noise = torch.full((1, 2, 32, 32), 0.3)  # a small wrong motion on a still picture: gated
    x = with_flow(noise, image, image)
    plain, handing = StillGate()(x), StillGate(hands_on_keep=True)(x)
    assert handing.shape[1] == plain.shape[1] + 1
    torch.testing.assert_close(handing[:, :-1], plain)
    assert handing[:, -1].max() < 1e-2  # nothing kept


def noisy(image: torch.Tensor, levels: float, seed: int) -> torch.Tensor:
    """``image`` with Gaussian noise of ``levels`` 8-bit levels, rounded to them as a camera's frames are."""
    noise = torch.randn(image.shape, generator=torch.Generator().manual_seed(seed)) * levels / 255
    return ((image + noise).clamp(0, 1) * 255).round() / 255


def test_a_warp_s_residual_with_its_noise_restored_matches_standing_still_on_frames_of_noise():
    """Bilinear interpolation averages the warped frame's noise: on two frames of noise alone, a half-pixel warp
    leaves about sqrt(5/8) of the residual. Restored, every shift leaves what standing still leaves."""
    grey = torch.full((1, 3, 96, 96), 0.5)
    prev, cur = noisy(grey, 4, 0), noisy(grey, 4, 1)
    unwarped = (prev - cur).abs().mean(1, keepdim=True)
    noise = noise_floor(unwarped)
    assert abs(float(noise.flatten()[0]) / float(unwarped.mean()) - 1) < 0.05
    for shift in [(0.5, 0.5), (0.5, 0.0), (0.25, 0.0), (1.3, -2.7)]:
        flow = torch.tensor(shift).view(1, 2, 1, 1).expand(1, 2, 96, 96)
        warped = (prev - warp(cur, flow)).abs().mean(1, keepdim=True)[..., 4:-4, 4:-4]
        restored = with_noise_restored(warped, flow[..., 4:-4, 4:-4], noise)
        assert abs(float(restored.mean()) / float(unwarped.mean()) - 1) < 0.03, shift
    assert float(warped.mean()) < 0.85 * float(unwarped.mean())  # the shift (1.3, -2.7) alone gains a sixth


def test_the_noise_floor_is_read_where_the_pair_is_explained_with_part_of_the_picture_not():
    """Two noisy frames of one picture, a fifth of whose pixels changed altogether (what no flow explains): the
    floor reads the mean noise residual of the rest, a tenth over (the noise's 31st percentile for its 25th)."""
    image = textured(80, 80)
    prev, cur = noisy(image, 4, 0), noisy(image, 4, 1)
    cur[..., :16, :] = torch.rand(1, 3, 16, 80, generator=torch.Generator().manual_seed(3))
    residual = (prev - cur).abs().mean(1, keepdim=True)
    floor = float(noise_floor(residual).flatten()[0])
    assert 1.0 < floor / float(residual[..., 16:, :].mean()) < 1.2


def test_the_still_gate_zeroes_a_noisy_still_picture_s_sub_pixel_flow():
    """Before a static camera with noisy frames the net fits the noise with sub-pixel flow, and any sub-pixel warp
    explains such a pair better than standing still (its interpolation averages the noise away): the static
    background was painted (box with noise of 4 levels; docs/models.md). Judged at the same noise, it stays still;
    the true motion of a noisy texture is kept, before a static camera and before one that follows."""
    smooth = F.avg_pool2d(torch.rand(1, 3, 64, 64, generator=torch.Generator().manual_seed(5)), 9, 1, 4)
    faint = 0.5 + 0.1 * (smooth - 0.5)  # a wall's faint texture, under the noise's
    fitted = torch.full((1, 2, 64, 64), 0.5)  # a half-pixel fit: the warp that averages the noise most
    image = textured(64, 64)
    for gate in (StillGate(), StillGate(follows_camera=True)):
        assert gate(with_flow(fitted, noisy(faint, 4, 0), noisy(faint, 4, 1)))[:, :2].abs().mean() < 0.1

        prev, moved = noisy(image, 4, 0), noisy(torch.roll(image, shifts=1, dims=-1), 4, 1)  # moves 1 px right
        truth = torch.zeros(1, 2, 64, 64)
        truth[:, 0] = 1.0
        kept = gate(with_flow(truth, prev, moved))[:, :2]
        assert (kept[..., 4:-4, 4:-4] - truth[..., 4:-4, 4:-4]).abs().max() < 1e-2


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
