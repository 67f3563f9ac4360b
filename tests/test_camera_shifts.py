"""Camera shifts of an exact-flow stream: the pixels change, the flow does not, and each shift is repeatable."""

from __future__ import annotations

import numpy as np
import pytest

from models.camera_shifts import SHIFTS, shift
from models.streams import generate


@pytest.fixture(scope="module")
def stream():
    return generate(size=64, frames=6, seed=0)


@pytest.mark.parametrize("name", sorted(SHIFTS))
def test_a_shift_changes_the_pixels_keeps_the_flow_and_repeats(stream, name):
    shifted = shift(stream, name, seed=1)
    assert shifted.frames.shape == stream.frames.shape and shifted.frames.dtype == np.uint8
    assert shifted.flow is stream.flow
    assert np.abs(shifted.frames.astype(int) - stream.frames).mean() > 1.0
    assert np.array_equal(shift(stream, name, seed=1).frames, shifted.frames)


def test_night_is_dark_and_noisy(stream):
    night = shift(stream, "night").frames.astype(float)
    assert night.mean() < 0.4 * stream.frames.mean()
    flat = night[:, :, :, 0] - np.roll(night[:, :, :, 0], 1, axis=2)
    assert flat.std() > 2.0  # sensor noise: neighbouring pixels differ by several levels


def test_flicker_changes_the_light_from_frame_to_frame(stream):
    means = shift(stream, "flicker").frames.reshape(len(stream.frames), -1).mean(1) / stream.frames.reshape(
        len(stream.frames), -1
    ).mean(1)
    assert means.max() - means.min() > 0.2


def test_an_unknown_shift_is_refused_in_words(stream):
    with pytest.raises(ValueError, match="unknown shift 'fog'"):
        shift(stream, "fog")
