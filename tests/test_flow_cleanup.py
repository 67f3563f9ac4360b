"""The fill (flat or unsure pixels take the flow of their confident neighbours) and the image evidence it shares with
the still gate (``models.flow_cleanup``)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from image_support import noisy, textured, with_flow

from models.flow_cleanup import (
    EdgeAwareFill,
    box_mean,
    close_gaps,
    confidence,
    neighbour_sum,
    noise_correlation,
    noise_floor,
    with_noise_restored,
)
from models.flow_loss import warp


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


def test_a_warp_s_residual_with_its_noise_restored_matches_standing_still_on_frames_of_noise():
    """Bilinear interpolation averages the warped frame's noise: on two frames of noise alone, a half-pixel warp
    leaves about sqrt(5/8) of the residual. Restored, every shift leaves what standing still leaves."""
    grey = torch.full((1, 3, 96, 96), 0.5)
    prev, cur = noisy(grey, 4, 0), noisy(grey, 4, 1)
    unwarped = (prev - cur).abs().mean(1, keepdim=True)
    noise, correlation = noise_floor(unwarped), noise_correlation(prev, cur)
    assert abs(float(noise.flatten()[0]) / float(unwarped.mean()) - 1) < 0.05
    assert float(correlation) < 0.1  # independent noise
    for shift in [(0.5, 0.5), (0.5, 0.0), (0.25, 0.0), (1.3, -2.7)]:
        flow = torch.tensor(shift).view(1, 2, 1, 1).expand(1, 2, 96, 96)
        warped = (prev - warp(cur, flow)).abs().mean(1, keepdim=True)[..., 4:-4, 4:-4]
        restored = with_noise_restored(warped, flow[..., 4:-4, 4:-4], noise, correlation)
        assert abs(float(restored.mean()) / float(unwarped.mean()) - 1) < 0.03, shift
    assert float(warped.mean()) < 0.85 * float(unwarped.mean())  # the shift (1.3, -2.7) alone gains a sixth


def test_noise_alike_in_neighbouring_pixels_is_read_so_and_restored_as_much_as_a_warp_averaged_away():
    """Noise averaged over 3x3 pixels (as a codec's or a scaled frame's is alike in neighbours: its neighbour's
    correlation 2/3) loses less to a warp's interpolation than independent noise does: restored as if independent, a
    half-pixel warp's residual would be put back above what standing still leaves; read with its correlation, not."""
    grey = torch.full((1, 3, 100, 100), 0.5)
    blurred = [F.avg_pool2d(noisy(grey, 12, seed) - 0.5, 3, 1) + 0.5 for seed in (0, 1)]
    prev, cur = (((b * 255).round() / 255) for b in blurred)
    unwarped = (prev - cur).abs().mean(1, keepdim=True)
    noise, correlation = noise_floor(unwarped), noise_correlation(prev, cur)
    assert 0.55 < float(correlation) < 0.75
    flow = torch.tensor([0.5, 0.5]).view(1, 2, 1, 1).expand(1, 2, 98, 98)
    warped = (prev - warp(cur, flow)).abs().mean(1, keepdim=True)[..., 4:-4, 4:-4]
    restored = with_noise_restored(warped, flow[..., 4:-4, 4:-4], noise, correlation)
    assert abs(float(restored.mean()) / float(unwarped.mean()) - 1) < 0.04
    as_if_independent = with_noise_restored(warped, flow[..., 4:-4, 4:-4], noise, torch.zeros(()))
    assert float(as_if_independent.mean()) > 1.1 * float(unwarped.mean())


def test_the_noise_floor_is_read_where_the_pair_is_explained_with_part_of_the_picture_not():
    """Two noisy frames of one picture, a fifth of whose pixels changed altogether (what no flow explains): the
    floor reads the mean noise residual of the rest, about a seventh over (the noise's 12.5th percentile for its
    10th)."""
    image = textured(80, 80)
    prev, cur = noisy(image, 4, 0), noisy(image, 4, 1)
    cur[..., :16, :] = torch.rand(1, 3, 16, 80, generator=torch.Generator().manual_seed(3))
    residual = (prev - cur).abs().mean(1, keepdim=True)
    floor = float(noise_floor(residual).flatten()[0])
    assert 1.0 < floor / float(residual[..., 16:, :].mean()) < 1.2
