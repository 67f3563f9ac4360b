"""The camera's motion read off a flow field: the background's, however much of the picture movers cover."""

from __future__ import annotations

import torch
from image_support import textured

from models.camera_motion import (
    REACH_PX,
    STILL_PX,
    affine_motion,
    camera_motion,
    picture_translation,
    similarity_motion,
)
from models.flow_loss import warp


def field(background: tuple[float, float], mover: tuple[float, float], covered: float, noise: float = 0.03,
          seed: int = 0) -> torch.Tensor:  # fmt: skip
    """(1, 2, 60, 80): the background's flow with noise, a mover's on the left ``covered`` share of the columns."""
    flow = torch.tensor(background).view(1, 2, 1, 1).repeat(1, 1, 60, 80)
    flow[..., : round(80 * covered)] = torch.tensor(mover).view(1, 2, 1, 1)
    return flow + noise * torch.randn(flow.shape, generator=torch.Generator().manual_seed(seed))


def test_the_camera_s_motion_is_the_background_s_with_movers_on_nearly_half_the_picture():
    """A median of each component would be pulled to the mover's side; the most common flow is not."""
    flows = torch.cat([field((0.7, -0.45), (3.0, 1.0), 0.45), field((-1.23, 0.2), (0.4, -2.0), 0.3, noise=0.08)])
    motion = camera_motion(flows).flatten(1)
    assert torch.allclose(motion, torch.tensor([[0.7, -0.45], [-1.23, 0.2]]), atol=0.02), motion


def test_a_static_camera_reads_as_exactly_still():
    """Noise and small biases under STILL_PX are no camera motion: the gate then gates to zero, as it always did."""
    flows = torch.cat([field((0.0, 0.0), (2.0, 0.0), 0.45), field((0.06, -0.04), (0.0, 1.5), 0.2)])
    assert torch.equal(camera_motion(flows), torch.zeros(2, 2, 1, 1))
    assert STILL_PX <= 0.1


def test_no_flow_within_reach_reads_as_a_still_camera():
    """Flow beyond REACH_PX does not pile up at the histogram's border as a false motion."""
    flows = field((REACH_PX + 10, 0.0), (-(REACH_PX + 5), 3 * REACH_PX), 0.4)
    assert torch.equal(camera_motion(flows), torch.zeros(1, 2, 1, 1))


def test_the_camera_s_motion_takes_no_gradient():
    flow = field((1.0, 0.0), (0.0, 0.0), 0.2).requires_grad_()
    assert not camera_motion(flow).requires_grad


def test_a_motion_beyond_the_reach_asked_for_is_not_read():
    flows = field((2.0, 0.5), (0.0, 0.0), 0.3)
    assert torch.allclose(camera_motion(flows).flatten(), torch.tensor([2.0, 0.5]), atol=0.02)
    assert torch.equal(camera_motion(flows, reach_px=1.5), torch.zeros(1, 2, 1, 1))


def test_a_fast_pan_is_read_as_precisely_as_a_shake():
    """The coarse histogram finds the peak anywhere in reach, the fine one refines it: a pan of 25 px with movers on
    two fifths of the picture at 20 px (within the coarse peak's neighbourhood of neither)."""
    flows = torch.cat([field((25.3, -7.62), (20.0, 3.0), 0.4, noise=0.08), field((-0.45, 0.3), (-30.0, 0.0), 0.45)])
    motion = camera_motion(flows).flatten(1)
    assert torch.allclose(motion, torch.tensor([[25.3, -7.62], [-0.45, 0.3]]), atol=0.02), motion


def test_two_close_motions_read_as_the_more_common_one():
    """Within the coarse bins' reach of each other, the fine histogram tells the two apart."""
    flows = field((3.0, 1.0), (3.6, 1.0), 0.4, noise=0.02)
    assert torch.allclose(camera_motion(flows).flatten(), torch.tensor([3.0, 1.0]), atol=0.02)


def similarity_field(pan: tuple[float, float], zoom: float, roll: float, h: int = 60, w: int = 80) -> torch.Tensor:
    """(1, 2, h, w): the flow of a pan with a zoom and a roll (per px from the picture's centre)."""
    ys, xs = torch.meshgrid(torch.arange(h) - (h - 1) / 2, torch.arange(w) - (w - 1) / 2, indexing="ij")
    return torch.stack([pan[0] + zoom * xs - roll * ys, pan[1] + zoom * ys + roll * xs])[None]


def test_a_pan_that_zooms_and_rolls_is_fitted_as_a_similarity_whatever_a_mover_does():
    """A pan of 6 px with a zoom and a roll of 1 % (0.4 px at the sides) and a mover on a fifth of the picture moving
    otherwise: started from the translation, the fit follows the background, not the mover."""
    truth = similarity_field((6.0, -2.0), 0.01, -0.01)
    flow = truth.clone()
    flow[..., 10:30, 10:30] = torch.tensor([1.0, 3.0]).view(1, 2, 1, 1)
    noisy = flow + 0.05 * torch.randn(flow.shape, generator=torch.Generator().manual_seed(0))
    fit = similarity_motion(noisy, camera_motion(noisy), torch.ones(1, 1, 60, 80))
    assert (fit - truth).norm(dim=1).max() < 0.05


def test_a_pan_sheared_by_a_rolling_shutter_is_fitted_as_an_affine_map_whatever_a_mover_does():
    """A pan of 6 px whose flow changes down the picture (a rolling shutter's shear and stretch, 0.02 px a row) and a
    mover on a fifth of the picture: started from the translation, the affine fit follows the background."""
    ys, xs = torch.meshgrid(torch.arange(60) - 29.5, torch.arange(80) - 39.5, indexing="ij")
    truth = torch.stack([6.0 + 0.02 * ys + 0 * xs, -2.0 + 0.02 * ys])[None]
    flow = truth.clone()
    flow[..., 10:30, 10:30] = torch.tensor([1.0, 3.0]).view(1, 2, 1, 1)
    noisy = flow + 0.05 * torch.randn(flow.shape, generator=torch.Generator().manual_seed(0))
    fit = affine_motion(noisy, camera_motion(noisy), torch.ones(1, 1, 60, 80))
    assert (fit - truth).norm(dim=1).max() < 0.05
    assert (similarity_motion(noisy, camera_motion(noisy), torch.ones(1, 1, 60, 80)) - truth).norm(dim=1).max() > 0.3


def test_a_similarity_fit_without_inliers_keeps_the_translation():
    flow = similarity_field((3.0, 1.0), 0.0, 0.0)
    start = torch.tensor([3.0, 1.0]).view(1, 2, 1, 1)
    torch.testing.assert_close(similarity_motion(flow, start, torch.zeros(1, 1, 60, 80)), start.expand_as(flow))


def test_the_most_common_flow_near_a_given_motion_is_read_there():
    """Near (6, 0): the pan's flow on a third of the picture, though zero fills the rest; with no flow near, the
    motion given itself."""
    flow = torch.zeros(1, 2, 30, 30)
    flow[:, 0, :10] = 6.2
    assert torch.allclose(camera_motion(flow), torch.zeros(1, 2, 1, 1))
    near = camera_motion(flow, near=torch.tensor([6.0, 0.0]).view(1, 2, 1, 1))
    assert torch.allclose(near.flatten(), torch.tensor([6.2, 0.0]), atol=1e-5)
    alone = camera_motion(flow, near=torch.tensor([-9.0, 3.0]).view(1, 2, 1, 1))
    assert torch.allclose(alone.flatten(), torch.tensor([-9.0, 3.0]))


def test_the_picture_s_translation_is_read_to_a_third_of_a_pixel():
    """Enough for the still gate, which reads the flow's most common value within a pixel and a half of it."""
    prev = textured(64, 80, seed=3)
    for true in ([3.3, -2.6], [-7.0, 0.4], [0.0, 0.0]):
        t = torch.tensor(true).view(1, 2, 1, 1)
        cur = warp(prev, -t.expand(1, 2, 64, 80))  # cur(x) = prev(x - t): the picture moved by t
        inner = (slice(None), slice(None), slice(8, -8), slice(8, -8))  # the warp's border padding left out
        read = picture_translation(prev[inner], cur[inner]).flatten()
        assert (read - torch.tensor(true)).abs().max() < 0.3, (true, read)


def test_a_tight_mover_beside_the_background_s_wider_spread_is_not_taken_for_the_camera():
    """A textured mover matched to 0.02 px, 2.4 px from a background whose noisy flow spreads 0.2 px (a night picture),
    on three tenths of the picture: the coarse histogram's peak falls between the two, and a fine histogram around it
    took the mover's tight cluster for the camera; centred first on the mass near it, it reads the background."""
    generator = torch.Generator().manual_seed(0)
    flow = torch.tensor([0.7, -0.3]).view(1, 2, 1, 1) + 0.2 * torch.randn(1, 2, 60, 80, generator=generator)
    flow[..., :24] = torch.tensor([3.1, -0.3]).view(1, 2, 1, 1) + 0.02 * torch.randn(1, 2, 60, 24, generator=generator)
    assert torch.allclose(camera_motion(flow).flatten(), torch.tensor([0.7, -0.3]), atol=0.05)
