"""Pairs with a known flow made from the stream's own frames: the flow is exact, the look is the stream's, and the
loss reads only the made pair."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from models.block_codec import GRID_EVIDENCE, READ_EVERY, grid_strength
from models.feeds import PRIOR_GROUP, KnownMotionFeed
from models.flow_loss import warp
from models.known_motion import KnownMotion, StreamMotion, known_flow_loss, light_change, sensor_noise
from models.online import KNOWN_MOTION, STARVED_PRIOR_BOOST, frame_pair
from models.still_gate import CAMERA_READING
from models.streams import generate
from tests.codec_support import stream


def real_pair(noise: float = 0.0, gain: float = 1.0) -> torch.Tensor:
    """Two frames of a generated stream (a photo moving a little), the second with ``noise`` levels of sensor noise
    and ``gain`` times the light."""
    stream = generate(size=64, frames=2, seed=1, patches=0)
    rng = np.random.default_rng(0)
    second = stream.frames[1] * gain + rng.normal(0, noise, stream.frames[1].shape)
    first = stream.frames[0] + rng.normal(0, noise, stream.frames[0].shape)
    as_uint8 = [np.clip(np.rint(f), 0, 255).astype(np.uint8) for f in (first, second)]
    return frame_pair(*as_uint8), torch.from_numpy(stream.flow[0]).permute(2, 0, 1)[None]


def moving(camera: float, movers: float) -> StreamMotion:
    """A stream whose every pixel moves ``camera`` px but a fifth, which moves ``movers``."""
    motion = StreamMotion()
    flow = torch.full((1, 2, 10, 10), camera / 2**0.5)
    flow[..., :2, :] = movers / 2**0.5
    motion.observe(flow)
    return motion


def test_the_stream_motion_reads_the_typical_and_the_fast_pixels():
    motion = moving(camera=1.5, movers=6.0)
    camera, movers = motion.sizes(torch.zeros(()))
    assert float(camera) == pytest.approx(1.5, rel=1e-4) and float(movers) == pytest.approx(6.0, rel=1e-4)
    assert [float(v) for v in StreamMotion().sizes(torch.zeros(()))] == [0.0, 0.0]


def test_the_camera_as_the_net_read_it_sizes_the_camera_the_flow_shown_the_movers():
    """Where the still gate stood the background still (a night camera's shake within the noise) the flow shown is
    zero there; the camera's motion the gate read sizes the made pairs' camera all the same."""
    flow = torch.zeros(1, 2, 10, 10)
    flow[..., :2, :] = 6.0 / 2**0.5
    motion = StreamMotion()
    motion.observe(flow, camera=torch.tensor([0.6, 0.8]).view(1, 2, 1, 1))
    camera, movers = motion.sizes(torch.zeros(()))
    assert float(camera) == pytest.approx(1.0, rel=1e-4) and float(movers) == pytest.approx(6.0, rel=1e-4)


def test_the_feed_sizes_its_camera_by_the_still_gate_s_reading_where_a_step_brings_one():
    pair, flow = real_pair()
    output = torch.cat([flow, flow]) * 0.0
    read, unread = KnownMotionFeed(), KnownMotionFeed()
    read.observe(output, {CAMERA_READING: torch.tensor([0.0, 2.0]).view(1, 2, 1, 1)})
    unread.observe(output, {})
    assert float(read.stream.camera) == pytest.approx(2.0) and float(unread.stream.camera) < 1e-6
    read.observe(output, {CAMERA_READING: torch.full((1, 2, 1, 1), float("nan"))})  # a broken frame's
    assert torch.isfinite(read.stream.camera)


def test_a_still_cameras_made_pair_stands_still_but_for_its_mover():
    pair, flow = real_pair()
    made = KnownMotion(seed=5)(pair, flow, moving(camera=0.0, movers=3.0))
    speeds = torch.linalg.vector_norm(made.flow, dim=1)
    assert (speeds < 1e-4).float().mean() > 0.5 and speeds.amax() > 1.0


def test_the_made_pair_moves_by_its_known_flow():
    """Warping the made pair's second frame back by the known flow gives its first, where the flow is known and the
    picture smooth enough for bilinear sampling to agree (a noise-free pair: nothing is added)."""
    pair, flow = real_pair()
    still = torch.cat([pair[:, 3:], pair[:, 3:]], 1)  # no noise to borrow, no change of light
    made = KnownMotion(seed=3)(still, torch.zeros_like(flow), moving(camera=2.0, movers=4.0))
    back = warp(made.pair[:, 3:], made.flow)
    inner = made.valid.clone()
    inner[..., :4, :], inner[..., -4:, :], inner[..., :, :4], inner[..., :, -4:] = 0, 0, 0, 0
    error = ((back - made.pair[:, :3]).abs().mean(1, keepdim=True) * inner).sum() / inner.sum()
    moved = ((made.pair[:, 3:] - made.pair[:, :3]).abs().mean(1, keepdim=True) * inner).sum() / inner.sum()
    assert made.flow.abs().amax() > 1.0 and error < 0.25 * moved  # it moved, and the known flow explains it
    assert 0.5 < made.valid.mean() <= 1.0


def test_a_made_pair_serves_every_second_pair_for_its_hold_as_it_was_made_then_another_is_made():
    """As it was made, not made again from the newer frame: the first stage of two learns, at each step, from the
    gradient of the pair two steps before, pushed through this step's pair."""
    pair, flow = real_pair()
    motion, stream = KnownMotion(seed=0, hold=2, every=2), moving(2.0, 4.0)
    newer = [real_pair(noise=1.0 + i)[0] for i in range(6)]  # each step's real pair is another
    made = [motion(newer[i], flow, stream) for i in range(6)]
    same = [[torch.equal(a.pair, b.pair) and torch.equal(a.flow, b.flow) for b in made] for a in made]
    assert same[0][2] and same[1][3] and not same[0][1] and not same[2][4] and not same[3][5]


def test_a_made_pair_is_served_known_nowhere_for_its_unknown_pairs_then_another_is_made():
    """Served ``hold`` times as made, then ``unknown`` times more with nothing known (its loss 0, so the gradient the
    last stage sends back is 0), and the feed says which: the service shows no loss for those."""
    pair, flow = real_pair()
    motion, stream = KnownMotion(seed=0, hold=2, every=2, unknown=1), moving(2.0, 4.0)
    newer = [real_pair(noise=1.0 + i)[0] for i in range(8)]
    made = [motion(newer[i], flow, stream) for i in range(8)]
    assert [m.known for m in made] == [True, True, True, True, False, False, True, True]
    assert torch.equal(made[4].pair, made[0].pair) and torch.equal(made[4].flow, made[0].flow)
    assert made[4].valid.sum() == 0 and made[0].valid.sum() > 0
    assert known_flow_loss(torch.randn(2, 2, *pair.shape[-2:]), made[4].target()) == 0
    assert not torch.equal(made[6].pair, made[0].pair)  # made afresh after its unknown serving
    feed, single, learns, single_learns = KnownMotionFeed(seed=0, stages=2), KnownMotionFeed(seed=0), [], []
    for i in range(12):  # the service's hold, every second pair: each slot's fifth serving is known nowhere at D = 2
        feed(newer[i % 8])
        single(newer[i % 8])
        learns.append(feed.learns)
        single_learns.append(single.learns)
    assert learns == [True] * 8 + [False, False, True, True] and all(single_learns)


def test_the_made_pair_borrows_the_streams_noise_and_light():
    clean, flow = real_pair()
    noisy, _ = real_pair(noise=6.0)
    assert float(sensor_noise(clean, flow)) < 1.5 / 255 < 4.0 / 255 < float(sensor_noise(noisy, flow)) < 9.0 / 255
    darker, _ = real_pair(gain=0.8)  # darker: no pixel saturates
    gain = light_change(darker, flow)
    assert gain.shape == (1, 1, 64, 1) and torch.allclose(gain, torch.tensor(0.8), atol=0.03)
    made = KnownMotion(seed=1)(darker, flow, moving(2.0, 4.0))
    ratio = made.pair[:, 3:].mean() / made.pair[:, :3].mean()
    assert ratio == pytest.approx(0.8, abs=0.04)


def test_the_loss_reads_the_made_pair_alone_and_is_zero_for_its_flow():
    pair, flow = real_pair()
    made = KnownMotion(seed=2)(pair, flow, moving(2.0, 4.0))
    target = made.target()
    shown_flow = torch.full_like(made.flow, 50.0)  # whatever the shown pair's flow is, the loss does not read it
    assert float(known_flow_loss(torch.cat([shown_flow, made.flow]), target)) == pytest.approx(0.0, abs=1e-6)
    off = made.flow + torch.tensor([3.0, 4.0]).view(1, 2, 1, 1)
    assert float(known_flow_loss(torch.cat([shown_flow, off]), target)) == pytest.approx(5.0, rel=1e-5)


def test_a_broken_frames_flow_spoils_no_pair_made_after_it():
    pair, flow = real_pair()
    feed = KnownMotionFeed(seed=2)
    feed.observe(torch.cat([flow, flow]))
    feed.observe(torch.full((2, 2, *pair.shape[-2:]), float("nan")))  # a NaN frame's flow (the nan_loss fault)
    for _ in range(4):
        step_input, target = feed(pair)
        assert torch.isfinite(step_input).all() and torch.isfinite(target).all()


def test_a_pair_made_of_a_broken_frame_spoils_none_of_the_pairs_it_serves_after_its_own():
    """A made pair is served ``hold`` times: made of a NaN frame (the ``nan_loss`` fault) and served as it was, every
    step it served would be NaN, and the service would restore its weights at each."""
    pair, flow = real_pair()
    broken = torch.full_like(pair, float("nan"))
    motion, stream = KnownMotion(seed=3, hold=4, every=1), moving(2.0, 4.0)
    assert torch.isfinite(light_change(broken, flow)).all()
    assert not torch.isfinite(motion(broken, flow, stream).pair).all()  # its own step's loss is NaN (restored once)
    for _ in range(3):  # the pairs it serves after it: finite, and known nowhere (they teach nothing)
        served = motion(pair, flow, stream)
        assert torch.isfinite(served.pair).all() and float(served.valid.sum()) == 0.0
    assert float(motion(pair, flow, stream).valid.mean()) > 0.5  # then a pair made afresh


class Recorder:
    """A pipeline's ``set_group_options``, recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []

    def set_group_options(self, holding: str, options: dict) -> None:
        self.calls.append((holding, dict(options)))


def test_a_starved_codecs_stream_gets_coded_made_pairs_and_its_priors_let_go():
    """``models.block_codec``'s evidence, read over the stream: the made pairs go through the codec's round trip and
    the priors' group takes the options for a starved stream, once, and again after the weights were loaded."""
    options = KNOWN_MOTION.prior_options(stages=2)
    assert options[True]["anchor"] == 0.0 and options[False]["anchor"] == KNOWN_MOTION.prior_anchor
    assert options[True]["lr_scale"] == pytest.approx(
        STARVED_PRIOR_BOOST * KNOWN_MOTION.prior_scale * KNOWN_MOTION.stage_rate(2)
    )
    for starved in (True, False):
        feed, pipe = KNOWN_MOTION.feed(seed=0, stages=2), Recorder()
        made_grids = []
        for pair in stream(starved_grid=True, skips=starved, pairs=2 * READ_EVERY):
            step_input, _ = feed(pair)
            made_grids.append(float(grid_strength(step_input[1:, 3:6])))
            feed.tune(pipe)
        assert pipe.calls == ([(PRIOR_GROUP, options[True])] if starved else [])
        assert (min(made_grids[READ_EVERY:]) > GRID_EVIDENCE) is starved  # made afresh after the decision: coded
        feed.retune()
        feed.tune(pipe)
        assert pipe.calls[-1] == (PRIOR_GROUP, options[starved])
