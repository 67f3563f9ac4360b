"""models.stale_gradient: a stale gradient moved with the flow, against hand-made cases."""

from __future__ import annotations

import math

import pytest
import torch

from models.stale_gradient import motion_aligned


def output_with_flow(u: float, v: float, h: int = 6, w: int = 8, extra: int = 3) -> torch.Tensor:
    """A stage output ``[flow, extra channels]`` whose flow is (u, v) px everywhere."""
    flow = torch.tensor([u, v]).view(1, 2, 1, 1).expand(1, 2, h, w)
    return torch.cat([flow, torch.rand(1, extra, h, w)], 1)


def test_without_motion_the_gradient_stays_where_it_is():
    grad = torch.rand(1, 5, 6, 8)
    torch.testing.assert_close(motion_aligned(output_with_flow(0, 0), grad, 2), grad)


def test_content_moving_right_takes_the_gradient_it_had_frames_apart_times_the_flow_to_the_left():
    grad = torch.rand(1, 5, 6, 8)
    aligned = motion_aligned(output_with_flow(1.0, 0.0), grad, 2)  # 1 px/frame to the right, gradient 2 frames old
    torch.testing.assert_close(aligned[..., 2:], grad[..., :-2])
    assert aligned[..., :2].abs().max() < 1e-6  # nothing was there two frames ago: no gradient from outside the frame


def test_half_pixel_motion_interpolates_between_neighbours_along_both_axes():
    grad = torch.rand(1, 1, 6, 8)
    aligned = motion_aligned(output_with_flow(0.25, 0.5), grad, 2)  # moved 0.5 px right, 1 px down
    want = 0.5 * (grad[..., :-1, :-1] + grad[..., :-1, 1:])
    torch.testing.assert_close(aligned[..., 1:, 1:], want)


def test_a_non_finite_flow_counts_as_no_motion():
    out = output_with_flow(0, 0)
    out[0, 0, 1, 1], out[0, 1, 2, 3] = math.nan, math.inf
    grad = torch.rand(1, 5, 6, 8)
    aligned = motion_aligned(out, grad, 4)
    assert torch.isfinite(aligned).all()
    torch.testing.assert_close(aligned, grad)


def test_an_output_without_flow_channels_is_refused():
    with pytest.raises(ValueError, match="output"):
        motion_aligned(torch.rand(1, 1, 6, 8), torch.rand(1, 1, 6, 8), 2)
