"""The learner process's frame loop and the stream's feed: what the feed reads of the frames (a starved codec, a
night camera's noise) goes out once, when it changes, and every frame's flow is published as the feed shows it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from models.block_codec import MACROBLOCK, READ_EVERY
from server.stream.protocol import FeedRead, FrameLearned
from tests.codec_support import H, W, frames
from tests.frame_loop_support import FPS, make_loop

pytestmark = pytest.mark.realtime


def test_a_stream_that_shows_a_starved_codec_says_so(tmp_path):
    """The feed's reading of the frames (``models.block_codec.StreamCodec``) goes out once, when it changes."""
    loop = make_loop(tmp_path, 0, auto=False, init="pretrained")
    assert loop.learner.size == (W, H)  # the frames reach the net at the size they were coded at
    for i, picture in enumerate(frames(starved_grid=True, skips=True, count=READ_EVERY + 4)):
        loop.on_frame(picture, i / FPS, 0, i, i / FPS)
    assert [m for m in loop.out if isinstance(m, FeedRead)] == [FeedRead(READ_EVERY / FPS, "starved_codec", True)]
    loop.learner.pipe.close()


def test_a_night_cameras_stream_says_so(tmp_path):
    """The feed's reading of the camera's noise against the picture's detail (``models.stream_noise``) goes out once,
    when it changes: frames dark, low in contrast and noisy, as a night camera sees them."""
    rng = np.random.default_rng(0)
    night = [np.clip(f * 0.15 + rng.normal(0, 4, f.shape), 0, 255).astype(np.uint8)
             for f in frames(starved_grid=False, skips=False, count=3 * READ_EVERY + 1)]  # fmt: skip
    loop = make_loop(tmp_path, 0, auto=False, init="pretrained")
    for i, picture in enumerate(night):
        loop.on_frame(picture, i / FPS, 0, i, i / FPS)
    assert [(m.reading, m.holds) for m in loop.out if isinstance(m, FeedRead)] == [("noisy_camera", True)]
    loop.learner.pipe.close()


def test_a_starved_stream_whose_frames_the_worker_skips_now_and_then_stays_starved(tmp_path):
    """Over a frame the worker skipped the encoder's unchanged blocks changed: only pairs of frames that follow one
    another read them (``StreamCodec.observe``'s ``contiguous``), else a CPU stream that drops frames lets its starved
    codec go."""
    made = frames(starved_grid=True, skips=False, count=40)
    for t in range(1, len(made)):  # each frame leaves half its macroblock columns as the frame before had them
        for x in range((t % 2) * MACROBLOCK, W, 2 * MACROBLOCK):
            made[t][:, x : x + MACROBLOCK] = made[t - 1][:, x : x + MACROBLOCK]
    loop = make_loop(tmp_path, 0, auto=False, init="pretrained")
    got = np.cumsum([0, *[1, 2, 2, 2, 2] * 3])  # one pair in five of frames that follow one another
    for seq in got:
        loop.on_frame(made[seq], seq / FPS, 0, int(seq), seq / FPS)
    assert [(m.reading, m.holds) for m in loop.out if isinstance(m, FeedRead)] == [("starved_codec", True)]
    loop.learner.pipe.close()


def test_every_frame_publishes_its_flow_as_the_feed_shows_it_those_in_flight_at_the_end_too(tmp_path, monkeypatch):
    """``Feed.show`` (a starved stream's memory of the flow) is what the page gets, for the frames the pipeline
    flushes once the source ends as for the others."""
    loop = make_loop(tmp_path, 1, auto=False, init="pretrained")
    shows = []
    monkeypatch.setattr(loop.learner.feed, "show", lambda output: shows.append(1) or torch.full_like(output, 7.0))
    for i, picture in enumerate(frames(starved_grid=True, skips=True, count=6)):
        loop.on_frame(picture, i / FPS, 0, i, i / FPS)
    loop.finish()
    flows = [m.flow for m in loop.out if isinstance(m, FrameLearned)]
    assert len(flows) == len(shows) == 5 and all((np.asarray(f) == 7.0).all() for f in flows)
    loop.learner.pipe.close()
