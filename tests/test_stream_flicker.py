"""``models.stream_flicker``: a stream whose light flickers (its gain swinging, a darker band rolling down it) reads
as flickering and is shown its pairs brought to one light row by row; one under a steady light, still or moving, is
shown as it was, bit for bit."""

import numpy as np
import pytest
import torch

from models.block_codec import READ_EVERY
from models.known_motion import light_change, over_light_rows
from models.online import KNOWN_MOTION
from models.stream_flicker import FLICKERING, StreamFlicker, light_change_or_still
from tests.image_support import noisy, textured

PAIRS = 4 * READ_EVERY


def stream(flickers: bool, moves: bool) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Pairs (1, 6, 64, 64) of a textured picture, each frame with noise of its own, and the pairs' flow: the
    picture still or moving 1 px to the right a frame; under a steady light or one that flickers as mains flicker
    shows on a camera (``models.camera_shifts.flicker``'s gain and band)."""
    picture = textured(64, 96, seed=3)
    rows = torch.linspace(0, 1, 64)[None, None, :, None]
    frames = []
    for t in range(PAIRS + 1):
        frame = picture[..., 16 - t % 16 : 80 - t % 16] if moves else picture[..., 16:80]
        if flickers:
            band = 1 - 0.2 * torch.cos(np.pi * ((rows + 0.37 * t) % 1 - 0.5)) ** 8
            frame = frame * (1 + 0.25 * np.sin(t / 0.53)) * band
        frames.append(noisy(frame, 0.5, t))
    flow = torch.zeros(1, 2, 64, 64)
    flow[:, 0] = 1.0 if moves else 0.0
    pairs = [torch.cat([a, b], 1) for t, (a, b) in enumerate(zip(frames, frames[1:], strict=False)) if t % 16 != 15]
    return pairs, flow  # a pair across the picture's wrap (every 16th, when moving) left out


@pytest.mark.parametrize(("flickers", "moves"), [(True, False), (True, True), (False, False), (False, True)])
def test_a_stream_flickers_where_its_light_changes_from_frame_to_frame(flickers, moves):
    pairs, flow = stream(flickers, moves)
    flicker = StreamFlicker()
    shown = []
    for pair in pairs:
        flicker.observe(pair, flow)
        shown.append(flicker(pair))
    assert flicker.flickering is flickers
    assert (float(flicker.reading) > FLICKERING) is flickers
    if not flickers:
        assert all(s is p for s, p in zip(shown, pairs, strict=True))  # as it came, bit for bit
        return

    # Brought to one light, the pair differs by its motion and noise alone: the band's rows no longer stand out.
    def residual(p: torch.Tensor) -> float:  # the second frame against the first where the motion takes it
        return float((p[:, :3, :, :-1] - p[:, 3:, :, 1:] if moves else p[:, :3] - p[:, 3:]).abs().mean())

    assert residual(shown[-1]) < 0.2 * residual(pairs[-1])


def test_the_feed_shows_and_learns_from_a_flickering_streams_pairs_at_one_light():
    feed = KNOWN_MOTION.feed(seed=0)
    pairs, _ = stream(flickers=True, moves=False)
    for pair in pairs:
        step_input, _ = feed(pair)
    assert feed.flickering_light
    rows = lambda frames: frames.mean((1, 3))  # noqa: E731 - each row's light
    assert float((rows(step_input[:1, :3]) - rows(step_input[:1, 3:])).abs().max()) < 0.01
    assert float((rows(pair[:, :3]) - rows(pair[:, 3:])).abs().max()) > 0.05


def test_a_row_is_read_standing_still_where_an_older_flow_misaligns_it_more():
    """A pipeline of two stages brings a flickering pair to one light under a flow two pairs old: where the picture
    stood still since that flow's pan, its rows are read without it (the band as the rows' running mean carries it);
    where the pan goes on, under it, as ``light_change`` reads them."""
    picture = textured(64, 96, seed=5)
    rows = torch.linspace(0, 1, 64)[None, None, :, None]
    band = 1 - 0.3 * torch.cos(np.pi * (rows - 0.5)) ** 8  # the second frame's light, row by row
    prev = picture[..., 16:80]
    pan = torch.zeros(1, 2, 64, 64)
    pan[:, 1] = 3.0  # the older flow: 3 px down
    stood_still = torch.cat([prev, prev * band], 1)
    panned = torch.cat([prev, torch.roll(prev, 3, 2) * band], 1)
    inner = slice(8, -8)  # away from the top and bottom, where the pan reads padding
    off = lambda gain: float((gain - over_light_rows(band))[..., inner, :].abs().max())  # noqa: E731

    assert off(light_change_or_still(stood_still, pan)) < 0.005 < 0.1 * off(light_change(stood_still, pan))
    assert torch.equal(light_change_or_still(panned, pan)[..., inner, :], light_change(panned, pan)[..., inner, :])
