"""models.block_codec: a starved codec told from the frames the net learns at, and a codec's round trip."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import torch

from models import block_codec
from models.block_codec import (
    GRID_EVIDENCE,
    GRID_GONE,
    READ_EVERY,
    UNCHANGED_EVIDENCE,
    UNCHANGED_GONE,
    StreamCodec,
    grid_strength,
    unchanged_share,
)
from models.online import frame_pair
from tests.codec_support import H, W, coded, opencv_jpeg, picture, stream, tensor


@pytest.mark.parametrize("quality", [8, 50, 90])
def test_the_round_trip_is_jpegs(quality):
    image = picture(0)
    ours, theirs = coded(image, quality).astype(np.float32), opencv_jpeg(image, quality).astype(np.float32)
    # Within about a level of libjpeg's (its integer transform rounds otherwise), nearer than the picture itself.
    assert np.abs(ours - theirs).mean() < min(1.5, np.abs(image - theirs).mean())
    assert float(grid_strength(tensor(ours.astype(np.uint8)))) == pytest.approx(
        float(grid_strength(tensor(theirs.astype(np.uint8)))), rel=0.05
    )


def test_a_grid_shows_only_where_the_frames_were_coded_at_the_size_read():
    image = picture(1)
    assert float(grid_strength(tensor(image))) < 1.1
    assert float(grid_strength(tensor(coded(image)))) > GRID_EVIDENCE
    # Coded at another size and resized, as a camera's frames reach the net: the grid no longer lines up.
    large = coded(picture(1, 2 * H + 16, 2 * W + 16))
    assert float(grid_strength(tensor(cv2.resize(large, (W, H), interpolation=cv2.INTER_AREA)))) < GRID_EVIDENCE


def test_the_unchanged_share_counts_the_macroblocks_left_as_they_were():
    first, second = picture(2), picture(3)
    second[:, : W // 4] = first[:, : W // 4]  # a quarter of the macroblocks
    pair = frame_pair(first, second)
    assert float(unchanged_share(pair)) == pytest.approx(0.25)


@pytest.mark.parametrize(("starved_grid", "skips"), [(True, True), (True, False), (False, True)])
def test_a_stream_is_starved_where_it_shows_a_grid_and_skipped_blocks(starved_grid, skips):
    codec = StreamCodec()
    decisions = []
    for pair in stream(starved_grid, skips, 2 * READ_EVERY):
        codec.observe(pair)
        decisions.append(codec.starved)
    assert not any(decisions[: READ_EVERY - 1]), "decided before its evidence was read"
    assert decisions[-1] is (starved_grid and skips)


def test_a_starved_stream_stays_so_while_its_evidence_dips_and_leaves_once_it_is_gone(monkeypatch):
    monkeypatch.setattr(block_codec, "READING_WEIGHT", 0.0)  # the running means stay where they are put

    def decided(starved: bool, grid: float, unchanged: float) -> bool:
        codec = StreamCodec()
        codec.starved, codec.grid, codec.unchanged = starved, torch.tensor(grid), torch.tensor(unchanged)
        for pair in stream(starved_grid=False, skips=False, pairs=READ_EVERY):
            codec.observe(pair)
        return codec.starved

    dipped = (GRID_EVIDENCE - 0.01, UNCHANGED_EVIDENCE - 0.01)
    assert decided(True, *dipped) and not decided(False, *dipped)
    assert not decided(True, GRID_GONE - 0.01, UNCHANGED_EVIDENCE) and not decided(
        True, GRID_EVIDENCE, UNCHANGED_GONE - 0.01
    )


def test_blocks_left_unchanged_count_only_between_frames_that_follow_one_another():
    """Frames the worker skipped (a CPU stream dropping frames) leave fewer blocks unchanged, and a frame paired with
    itself (a new shot) leaves every one so: neither is the encoder's evidence."""
    starved, skipped = stream(True, True, READ_EVERY), stream(True, False, 3 * READ_EVERY)
    for contiguous in (False, True):
        codec = StreamCodec()
        for pair in starved:
            codec.observe(pair)
        assert codec.starved
        for pair in skipped:  # coded, its blocks all changed: as frames two apart read
            codec.observe(pair, contiguous)
        assert codec.starved is not contiguous
    codec = StreamCodec()
    for pair in stream(True, False, 2 * READ_EVERY):
        codec.observe(pair)
        codec.observe(torch.cat([pair[:, 3:], pair[:, 3:]], 1))  # the frame paired with itself
    assert not codec.starved and float(codec.unchanged) < 0.01
