"""The variational refinement: DIS's last step (OpenCV's ``VariationalRefinement``), in torch."""

import cv2
import numpy as np
import pytest
import torch

from models.pretrain import make_dataset
from models.variational import VariationalRefinement, refine_flow


def _pair_and_flow(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Two frames of a generated clip (uint8 RGB) and their exact flow, made noisier: what a net hands over."""
    pairs, flows = make_dataset(1, 64, 48, 2, seed)
    noisy = flows[0].astype(np.float32) + np.random.default_rng(seed).normal(0, 0.3, flows[0].shape)
    return pairs[0], noisy.astype(np.float32)


def _as_tensor(image: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(image).permute(2, 0, 1)[None].float()


@pytest.mark.parametrize("seed", [0, 1])
def test_it_refines_as_opencvs_variational_refinement_does(seed):
    """Same energy, same solver: the two refinements move the flow alike (the sweep order within a checkerboard
    half and the borders differ a little)."""
    (prev, cur), flow = _pair_and_flow(seed)
    reference = flow.copy()
    cv2.VariationalRefinement_create().calc(*(cv2.cvtColor(f, cv2.COLOR_RGB2GRAY) for f in (prev, cur)), reference)
    ours = refine_flow(_as_tensor(flow), _as_tensor(prev) / 255, _as_tensor(cur) / 255)[0].permute(1, 2, 0).numpy()
    change = np.abs(reference - flow).mean()
    assert change > 0.05  # it does refine
    assert np.abs(ours - reference).mean() < 0.1 * change


def test_it_evens_out_a_noisy_flow_towards_the_motion_the_frames_show():
    """A textured square moving right by 1 px over a background moving left by 1 px; the flow handed over is the
    truth plus noise, as a net's window-by-window estimate is: the refinement takes most of the noise out, also
    inside the square."""
    rng = np.random.default_rng(0)
    canvas = rng.uniform(0, 1, (48, 66, 3)).astype(np.float32)
    square = rng.uniform(0, 1, (20, 20, 3)).astype(np.float32)
    prev, cur = canvas[:, :64].copy(), canvas[:, 1:65].copy()  # the background moves left: flow -1 px
    prev[14:34, 14:34], cur[14:34, 15:35] = square, square  # the square moves right: flow +1 px
    truth = torch.zeros(1, 2, 48, 64)
    truth[0, 0] = -1.0
    truth[0, 0, 14:34, 14:34] = 1.0
    noisy = truth + 0.4 * torch.randn(1, 2, 48, 64, generator=torch.Generator().manual_seed(0))
    refined = refine_flow(noisy, _as_tensor(prev), _as_tensor(cur))
    assert (refined - truth).abs().mean() < 0.4 * (noisy - truth).abs().mean()
    inside = (..., slice(16, 32), slice(16, 32))
    assert (refined - truth)[inside].abs().mean() < 0.5 * (noisy - truth)[inside].abs().mean()


def test_a_still_pair_stays_still_and_the_gradient_passes_straight_through():
    frame = torch.rand(1, 3, 24, 32, generator=torch.Generator().manual_seed(0))
    flow = torch.zeros(1, 2, 24, 32, requires_grad=True)
    x = torch.cat([flow, frame, frame], 1)
    out = VariationalRefinement()(x)
    torch.testing.assert_close(out[:, 2:], x[:, 2:])
    assert out[:, :2].abs().max() < 1e-3
    out[:, :2].sum().backward()
    torch.testing.assert_close(flow.grad, torch.ones_like(flow))


def test_after_a_still_gate_the_smoothness_does_not_reach_across_its_decision():
    """A small textured mover (8 px, 1 px right; its flow as handed over noisy) before a still, textured background
    the gate held at zero: without the gate's decision the smoothness pulls the still zeros into the mover, which
    loses a fifth of its motion; with it, the mover keeps its motion."""
    rng = np.random.default_rng(1)
    background, mover = rng.uniform(0, 1, (32, 32, 3)).astype(np.float32), rng.uniform(0, 1, (8, 8, 3))
    prev, cur = background.copy(), background.copy()
    prev[12:20, 12:20], cur[12:20, 13:21] = mover, mover
    flow = torch.zeros(1, 2, 32, 32)
    flow[0, 0, 12:20, 12:20] = 1.0
    keep = flow[:, :1].clone()  # the gate kept the mover and held the rest still
    flow = flow + 0.2 * torch.randn(1, 2, 32, 32, generator=torch.Generator().manual_seed(0)) * keep
    frames = (_as_tensor(prev), _as_tensor(cur))
    across = refine_flow(flow, *frames)[0, 0, 12:20, 12:20].mean()
    apart = refine_flow(flow, *frames, keep=keep)[0, 0, 12:20, 12:20].mean()
    assert across < 0.9 and apart > 0.95
    x = torch.cat([flow, *frames, keep], 1)  # as StillGate(hands_on_keep=True) hands it on
    out = VariationalRefinement(after_gate=True)(x)
    assert out.shape[1] == 8
    torch.testing.assert_close(out[:, :2], refine_flow(flow, *frames, keep=keep))


def test_a_pixel_the_gate_cut_off_on_a_flat_patch_keeps_its_flow():
    """On a flat patch (a saturated sky) a pixel whose four neighbours all fell on the other side of the gate's
    decision has no equation, neither data nor smoothness: its flow stays as it was, finite (a singular system,
    whose solve is NaN without ``DIAGONAL_FLOOR``)."""
    frame = torch.full((1, 3, 16, 16), 0.5)
    flow, keep = torch.zeros(1, 2, 16, 16), torch.zeros(1, 1, 16, 16)
    flow[..., 8, 8], keep[..., 8, 8] = 1.0, 1.0
    refined = refine_flow(flow, frame, frame, keep=keep)
    torch.testing.assert_close(refined, flow)
