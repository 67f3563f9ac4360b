import pytest
import torch

from models.flow_loss import (
    census,
    census_distance,
    census_loss,
    flow_lengths,
    flow_loss,
    landing_density,
    online_loss,
    online_zero_flow_loss,
    photometric_loss,
    pixel_grid,
    smoothness_loss,
    visible_mask,
    warp,
)


def test_integer_translation_warps_exactly():
    image = torch.rand(1, 3, 12, 16)
    flow = torch.zeros(1, 2, 12, 16)
    flow[:, 0], flow[:, 1] = 2.0, -1.0  # every pixel looks 2 px right and 1 px up
    out = warp(image, flow)
    torch.testing.assert_close(out[..., 1:, :-2], image[..., :-1, 2:])


def test_half_pixel_shift_interpolates_bilinearly():
    image = torch.arange(8.0).view(1, 1, 1, 8).expand(1, 3, 4, 8).contiguous()
    flow = torch.zeros(1, 2, 4, 8)
    flow[:, 0] = 0.5
    out = warp(image, flow)
    torch.testing.assert_close(out[..., :-1], image[..., :-1] + 0.5)
    torch.testing.assert_close(out[..., -1], image[..., -1])  # border padding


def test_identical_frames_zero_flow_have_zero_photometric_loss():
    frame = torch.rand(2, 3, 16, 16)
    frames = torch.cat([frame, frame], 1)
    zero = torch.zeros(2, 2, 16, 16)
    assert photometric_loss(zero, frames, eps=0.0).item() < 1e-6  # float rounding of the sampling grid
    assert smoothness_loss(zero).item() == 0.0


@pytest.mark.parametrize("size", [(96, 128), (45, 61), (12, 10)])  # 12x10: the pyramid stops after one halving
def test_zero_flow_loss_without_warps_is_the_online_loss_of_zero_flow(size):
    frames = torch.rand(2, 6, *size)
    expected = online_loss(torch.zeros(2, 2, *size), frames)
    assert online_zero_flow_loss(frames).item() == pytest.approx(expected.item(), rel=1e-5)


def test_true_flow_beats_zero_flow_on_a_translated_pair():
    image = torch.rand(1, 3, 32, 32)
    cur = torch.roll(image, shifts=3, dims=-1)  # content moves 3 px right: flow u = +3
    frames = torch.cat([image, cur], 1)
    truth = torch.zeros(1, 2, 32, 32)
    truth[:, 0] = 3.0
    assert photometric_loss(truth, frames, eps=0.0) < 1e-5  # exact at full resolution (wrapped columns masked)
    assert flow_loss(truth, frames) < 0.3 * flow_loss(torch.zeros_like(truth), frames)  # and on the pyramid


def test_loss_has_engine_signature_and_gradients():
    frames = torch.rand(1, 6, 16, 16)
    flow = torch.zeros(1, 2, 16, 16, requires_grad=True)
    loss = flow_loss(flow, frames)
    loss.backward()
    assert loss.dim() == 0 and flow.grad.abs().sum() > 0


def test_shape_errors_are_clear():
    with pytest.raises(ValueError, match="B, 6, H, W"):
        flow_loss(torch.zeros(1, 2, 8, 8), torch.zeros(1, 3, 8, 8))
    with pytest.raises(ValueError, match="do not match"):
        warp(torch.zeros(1, 3, 8, 8), torch.zeros(1, 2, 4, 4))


def test_diverged_flow_warps_to_the_border_without_crashing_backward():
    """A NaN/inf flow (diverged weights) must leave a finite warp and gradient: grid_sample's CPU backward
    segfaults on NaN grids, which would kill the worker before its non-finite-loss guard could act."""
    image = torch.rand(1, 3, 6, 6, requires_grad=True)
    far = torch.full((1, 2, 6, 6), 1e30)
    for bad in (float("nan"), float("inf"), -float("inf")):
        flow = torch.full((1, 2, 6, 6), bad, requires_grad=True)
        out = warp(image, flow)
        out.sum().backward()
        assert torch.isfinite(out).all() and torch.isfinite(image.grad).all()
        image.grad = None
    torch.testing.assert_close(warp(image, far), image[:, :, -1:, -1:].expand(1, 3, 6, 6))


def test_census_of_a_flat_image_is_zero_and_of_a_step_is_the_soft_sign():
    flat = torch.full((1, 3, 9, 9), 0.5)
    assert census(flat).abs().max() == 0
    image = torch.zeros(1, 3, 9, 9)
    image[..., 4, 5] = 10 / 255  # the right neighbour of the centre is 10 grey levels brighter
    c = census(image)
    assert c.shape == (1, 49, 9, 9)
    right = 3 * 7 + 4  # row 3 (centre row), column 4 (one right of the centre) of the 7x7 patch
    torch.testing.assert_close(c[0, right, 4, 4], torch.tensor(10 / (0.81 + 100) ** 0.5))
    left = 3 * 7 + 2
    torch.testing.assert_close(c[0, left, 4, 5], torch.tensor(-10 / (0.81 + 100) ** 0.5))  # the bright one's left
    assert c[0, :, 0, 0].abs().max() == 0  # far from the bright pixel nothing changes


def test_census_distance_counts_differing_neighbours_softly():
    a = torch.zeros(1, 49, 1, 1)
    b = a.clone()
    b[0, :7] = 1.0  # 7 of 49 neighbours flip from 0 to 1
    torch.testing.assert_close(census_distance(a, b), torch.full((1, 1, 1, 1), 7 / 49 * 1 / 1.1))


def test_census_loss_ignores_a_brightness_change_that_charbonnier_calls_motion():
    gen = torch.Generator().manual_seed(0)
    image = torch.nn.functional.avg_pool2d(torch.rand(1, 3, 24, 24, generator=gen), 3, 1, 1) * 0.8
    zero = torch.zeros(1, 2, 24, 24)
    same, brighter = torch.cat([image, image], 1), torch.cat([image, image + 0.1], 1)
    torch.testing.assert_close(census_loss(zero, brighter), census_loss(zero, same))
    assert photometric_loss(zero, brighter) > 10 * photometric_loss(zero, same)


def test_census_loss_prefers_the_true_flow():
    image = torch.nn.functional.avg_pool2d(
        torch.rand(1, 3, 32, 32, generator=torch.Generator().manual_seed(1)), 3, 1, 1
    )
    frames = torch.cat([image, torch.roll(image, shifts=2, dims=-1)], 1)
    truth = torch.zeros(1, 2, 32, 32)
    truth[:, 0] = 2.0
    assert census_loss(truth, frames) < 0.5 * census_loss(torch.zeros_like(truth), frames)
    assert flow_loss(truth, frames, photometric="census") < flow_loss(
        torch.zeros_like(truth), frames, photometric="census"
    )


def test_warp_gradients_match_finite_differences_inside_and_beyond_the_frame():
    """The clamp before grid_sample passes its gradient straight through; a position it moved lies outside the frame,
    where border sampling has no gradient, so the whole warp's gradient must still be the true one."""
    gen = torch.Generator().manual_seed(3)
    image = torch.rand(1, 3, 6, 7, generator=gen, dtype=torch.float64)
    flow = (torch.rand(1, 2, 6, 7, generator=gen, dtype=torch.float64) - 0.5) * 24  # reaches far outside the frame
    moved = (pixel_grid(6, 7, flow.device, flow.dtype) + flow).detach()
    assert ((moved[:, 0] < -1) | (moved[:, 0] > 7)).any() and ((moved[:, 0] > 0) & (moved[:, 0] < 6)).any()
    assert torch.autograd.gradcheck(warp, (image.requires_grad_(), flow.requires_grad_()))


def test_landing_density_counts_the_previous_pixels_that_land_on_each_current_one():
    flow = torch.zeros(2, 2, 12, 16)
    torch.testing.assert_close(landing_density(flow), torch.ones(2, 1, 12, 16))  # standing still: one each
    flow[1, 0] = 0.25  # a quarter pixel right: column 0 only keeps three quarters of its own pixel
    density = landing_density(flow)[1, 0]
    torch.testing.assert_close(density[:, 0], torch.full((12,), 0.75))
    torch.testing.assert_close(density[:, 1:], torch.ones(12, 15))  # the last column's quarter left the frame


def test_visible_mask_leaves_out_what_a_mover_covers_and_its_leading_edge():
    flow = torch.zeros(1, 2, 12, 16)
    flow[:, 0, :, 4:8] = 3.0  # columns 4-7 move 3 px right over a still background
    visible = visible_mask(flow)[0, 0, 6]
    covered, leading = [8, 9, 10], [5, 6, 7]  # background under the mover's new place; the mover's pixels landing there
    assert visible[covered + leading].max() == 0
    assert visible[[0, 1, 2, 3, 4, 11, 12, 13, 14, 15]].min() > 1 - 1e-5


def test_occlusion_mask_takes_the_covered_pixels_out_of_the_data_term():
    torch.manual_seed(0)
    prev = torch.rand(1, 3, 12, 16)
    cur = prev.clone()
    cur[..., 7:11] = prev[..., 4:8]  # a mover: columns 4-7 now at 7-10, covering the background there
    flow = torch.zeros(1, 2, 12, 16)
    flow[:, 0, :, 4:8] = 3.0  # the true flow
    frames = torch.cat([prev, cur], 1)
    assert photometric_loss(flow, frames, occlusion=True) < 0.1 * photometric_loss(flow, frames)


def test_a_warp_first_run_in_inference_mode_leaves_caches_a_graph_can_keep():
    """A shown sample forwards in inference mode (``pipeline_core.stage.forward_samples``); the pixel grid and bounds
    it caches must still serve a warp whose graph keeps them for its backward."""
    size = (7, 13)  # a size no other test warps at: its caches are made here
    image, flow = torch.rand(1, 3, *size), torch.rand(1, 2, *size)
    with torch.inference_mode():
        warp(image, flow)
    flow.requires_grad_(True)
    warp(image, flow).sum().backward()
    assert flow.grad is not None and torch.isfinite(flow.grad).all()


def test_flow_lengths_are_the_vectors_norms_and_a_still_vector_passes_no_gradient():
    flow = torch.randn(2, 2, 6, 7)
    flow[0, :, 0, 0] = 0.0  # a vector of length zero
    flow.requires_grad_()
    lengths = flow_lengths(flow)
    torch.testing.assert_close(lengths, torch.linalg.vector_norm(flow, dim=1, keepdim=True), rtol=1e-6, atol=1e-12)
    lengths.sum().backward()
    assert torch.isfinite(flow.grad).all() and flow.grad[0, :, 0, 0].abs().max() == 0
