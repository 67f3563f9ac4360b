"""``models.stream_noise``: a stream whose noise outweighs its picture's detail (a night camera) reads as noisy and is
shown smoothed, its edges kept; a clean one is shown as it was, bit for bit; the smoothing is a Gaussian as OpenCV
makes it where the colours differ within the noise."""

import cv2
import numpy as np
import pytest
import torch

from models.block_codec import READ_EVERY
from models.online import KNOWN_MOTION
from models.stream_noise import MAX_SMOOTHING, NOISY, RADIUS, StreamNoise, edge_keeping, gaussian
from tests.image_support import noisy, textured

PAIRS = 4 * READ_EVERY


def still_stream(light: float, levels: float) -> list[torch.Tensor]:
    """Pairs (1, 6, 64, 64) of one still textured picture at ``light`` of its brightness, each frame with noise of
    its own of ``levels`` 8-bit levels."""
    picture = textured(64, 64, seed=3) * light
    frames = [noisy(picture, levels, seed) for seed in range(PAIRS + 1)]
    return [torch.cat([a, b], 1) for a, b in zip(frames, frames[1:], strict=False)]


@pytest.mark.parametrize("sigma", [0.6, 1.5])
def test_the_smoothing_is_opencvs_gaussian(sigma):
    picture = textured(40, 56, seed=1)
    expected = cv2.GaussianBlur(picture[0].permute(1, 2, 0).numpy(), (2 * RADIUS + 1, 2 * RADIUS + 1), sigma,
                                borderType=cv2.BORDER_REPLICATE)  # fmt: skip
    assert np.allclose(gaussian(picture, torch.tensor(sigma))[0].permute(1, 2, 0).numpy(), expected, atol=1e-5)


def test_no_smoothing_leaves_the_picture_as_it_was():
    picture = textured(40, 56, seed=1)
    assert torch.equal(gaussian(picture, torch.tensor(0.0)), picture)


def test_within_the_noise_the_smoothing_is_the_gaussian():
    picture, sigma = textured(40, 56, seed=1), torch.tensor(1.5)
    assert torch.allclose(edge_keeping(picture, sigma, torch.tensor(1e4)), gaussian(picture, sigma), atol=1e-5)
    flat = noisy(torch.full((1, 3, 48, 48), 0.5), 5.0, seed=0)
    kept, blurred = edge_keeping(flat, sigma, torch.tensor(5 / 255)), gaussian(flat, sigma)
    assert float(kept.std()) < 1.1 * float(blurred.std()) < 0.3 * float(flat.std())


def test_an_edge_beyond_the_noise_is_kept():
    """Two flat colours, far apart against the noise, side by side: a Gaussian of the same width carries each into
    the other beside their edge (a mover's motion then spreads onto the still ground beside it), the smoothing does
    not, and no smoothing leaves the picture as it was."""
    step = torch.full((1, 3, 48, 48), 0.2)
    step[..., 24:] = 0.8
    step = noisy(step, 5.0, seed=1)
    sigma, noise = torch.tensor(1.5), torch.tensor(5 / 255)
    kept, blurred = edge_keeping(step, sigma, noise), gaussian(step, sigma)
    for column, side in ((23, 0.2), (24, 0.8)):
        assert abs(float(kept[..., column].mean()) - side) < 0.01 < 0.1 < abs(float(blurred[..., column].mean()) - side)
    assert torch.equal(edge_keeping(step, torch.tensor(0.0), noise), step)


@pytest.mark.parametrize(("light", "levels", "expected"), [(0.15, 4.0, True), (1.0, 0.5, False)])
def test_a_stream_is_noisy_where_its_noise_outweighs_its_detail(light, levels, expected):
    """Dark, low in contrast and noisy as a night camera sees it, against the same picture in daylight."""
    noise, flow = StreamNoise(), torch.zeros(1, 2, 64, 64)
    for pair in still_stream(light, levels):
        noise.observe(pair, flow)
    assert noise.noisy is expected
    assert (float(noise.reading) > NOISY) is expected
    if expected:
        assert 0.0 < float(noise.smoothing) <= MAX_SMOOTHING


def test_a_flickering_light_is_not_noise():
    """The whole picture's gain swinging from frame to frame, and a darker band rolling down it, as mains flicker
    shows on a camera: the change of light is read out before the noise (``light_change``), and what is left is the
    fine grain of the pair's residual alone."""
    picture, noise, flow = textured(64, 64, seed=3), StreamNoise(), torch.zeros(1, 2, 64, 64)
    rows = torch.linspace(0, 1, 64)[None, None, :, None]
    band = [1 - 0.2 * torch.cos(np.pi * ((rows + 0.37 * t) % 1 - 0.5)) ** 8 for t in range(PAIRS + 1)]
    frames = [noisy(picture * (1 + 0.25 * np.sin(t / 0.53)) * band[t], 0.5, t) for t in range(PAIRS + 1)]
    for a, b in zip(frames, frames[1:], strict=False):
        noise.observe(torch.cat([a, b], 1), flow)
    assert not noise.noisy and float(noise.reading) < 0.5 * NOISY


@pytest.mark.parametrize("night", [True, False])
def test_the_feed_shows_and_learns_from_a_noisy_streams_pairs_smoothed(night):
    """The step input's real pair (sample 0) is the stream's pair smoothed at night, each frame at the width and with
    the edges its noise asks for, the pair itself by day; the made pair is made from what the net is shown."""
    feed = KNOWN_MOTION.feed(seed=0)
    pairs = still_stream(0.15, 4.0) if night else still_stream(1.0, 0.5)
    for pair in pairs:
        step_input, _ = feed(pair)
    if night:
        assert not torch.equal(step_input[:1], pair)
        frames = edge_keeping(pair.reshape(2, 3, 64, 64), feed.noise.smoothing, feed.noise.level)
        assert torch.equal(step_input[:1], frames.reshape(pair.shape))
        assert float((step_input[:1, 3:] - step_input[:1, :3]).std()) < 0.6 * float((pair[:, 3:] - pair[:, :3]).std())
    else:
        assert torch.equal(step_input[:1], pair)
