"""The still gate: zero where nothing moves, the net's flow where the frames show motion (``models.still_gate``).

What it reads as the camera's motion: ``test_still_gate_camera.py``; what a followed pan gives each region:
``test_still_gate_pan.py``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from image_support import noisy, textured, with_flow

from models.still_gate import StillGate


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


def test_a_gate_hands_on_its_decision_when_asked():
    image = textured()
    noise = torch.full((1, 2, 32, 32), 0.3)  # a small wrong motion on a still picture: gated
    x = with_flow(noise, image, image)
    plain, handing = StillGate()(x), StillGate(hands_on_keep=True)(x)
    assert handing.shape[1] == plain.shape[1] + 1
    torch.testing.assert_close(handing[:, :-1], plain)
    assert handing[:, -1].max() < 1e-2  # nothing kept


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
