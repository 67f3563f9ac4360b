"""``models.stream_sharpening``: the unsharp mask, the forward-backward disagreement that judges it, and a stream that
sharpens only once its judgments say the net's flow agrees with itself better so (and stops when they no longer do);
a stream that does not is shown as it comes, bit for bit."""

import pytest
import torch

from models.online import KNOWN_MOTION
from models.stream_sharpening import (
    JUDGE_EVERY,
    JUDGE_LATER,
    JUDGMENTS,
    LEAST_DISAGREEMENT,
    StreamSharpening,
    disagreement,
    reversed_pair,
    sharpened,
)
from tests.image_support import textured


def pair_of(h: int = 32, w: int = 40, seed: int = 1) -> torch.Tensor:
    return torch.cat([textured(h, w, seed), textured(h, w, seed + 1)], 1)


def uniform(dx: float, dy: float, h: int = 24, w: int = 32) -> torch.Tensor:
    return torch.tensor([dx, dy]).view(1, 2, 1, 1).expand(1, 2, h, w).clone()


def test_sharpening_leaves_a_flat_picture_and_steepens_an_edge():
    flat = torch.full((1, 6, 16, 16), 0.4)
    assert torch.allclose(sharpened(flat), flat)
    ramp = torch.linspace(0.2, 0.8, 16).view(1, 1, 1, 16).expand(1, 6, 16, 16)
    edge = torch.where(ramp > 0.5, 0.7, 0.3)
    out = sharpened(edge)
    assert out.min() >= 0 and out.max() <= 1
    across = out[0, 0, 8]
    assert across[:8].min() < 0.3 and across[8:].max() > 0.7  # an overshoot each side: the edge is steeper
    assert torch.equal(reversed_pair(reversed_pair(edge)), edge)


@pytest.mark.parametrize(("backward", "expected"), [((-1.5, 0.5), 0.0), ((1.5, -0.5), 2 * (1.5**2 + 0.5**2) ** 0.5)])
def test_the_disagreement_is_zero_where_the_backward_flow_leads_back(backward, expected):
    assert float(disagreement(uniform(1.5, -0.5), uniform(*backward))) == pytest.approx(expected, abs=1e-5)


def test_the_disagreement_counts_only_the_pixels_whose_match_stays_inside():
    """A pan of 4 px to the right whose last columns the forward flow sends 20 px on, out of the picture: they would
    disagree by 16 px, but have no match inside to disagree with."""
    forward, backward = uniform(4.0, 0.0), uniform(-4.0, 0.0)
    forward[:, 0, :, -4:] = 20.0
    assert float(disagreement(forward, backward)) == pytest.approx(0.0, abs=1e-5)


def judge(sharpening: StreamSharpening, pairs: int, as_is: float, sharp: float) -> list[bool]:
    """Feed ``pairs`` pairs; each judgment offered comes back with the pair as it came disagreeing by ``as_is`` px
    and sharpened by ``sharp``: the decision after each."""
    decisions = []
    for _ in range(pairs):
        sharpening.observe(pair_of(24, 32))
        judgment = sharpening.judgment()
        if judgment is not None:
            assert judgment.shape == (4, 6, 24, 32) and sharpening.judgment() is None  # taken once
            flows = torch.cat([uniform(1, 0), uniform(-1 + as_is, 0), uniform(1, 0), uniform(-1 + sharp, 0)])
            sharpening.judged(flows)
            decisions.append(sharpening.sharpens)
    return decisions


def test_a_judgment_is_the_pair_and_its_sharpened_self_each_way():
    sharpening, pair = StreamSharpening(), pair_of()
    for _ in range(JUDGE_EVERY - 1):
        sharpening.observe(pair)
        assert sharpening.judgment() is None
    sharpening.observe(pair)
    judgment = sharpening.judgment()
    expected = torch.cat([pair, reversed_pair(pair), sharpened(pair), reversed_pair(sharpened(pair))])
    assert judgment is not None and torch.equal(judgment, expected)


def test_it_sharpens_after_a_full_window_of_judgments_that_say_so_and_stops_when_they_no_longer_do():
    sharpening, later = StreamSharpening(), JUDGE_LATER * JUDGMENTS
    decisions = judge(sharpening, JUDGE_EVERY * JUDGMENTS, as_is=1.0, sharp=0.9)
    assert decisions == [False] * (JUDGMENTS - 1) + [True]
    assert len(judge(sharpening, later, as_is=1.0, sharp=0.98)) == JUDGMENTS  # then judged less often
    assert sharpening.sharpens  # between the two thresholds: it holds
    assert not judge(sharpening, later, as_is=1.0, sharp=1.1)[-1]
    assert not judge(StreamSharpening(), JUDGE_EVERY * JUDGMENTS + later, as_is=1.0, sharp=0.97)[-1]


def test_a_scene_that_stands_still_is_never_sharpened():
    """Disagreements of a few thousandths of a pixel are the net's rounding: their ratio says nothing."""
    still = LEAST_DISAGREEMENT / 4
    assert not any(judge(StreamSharpening(), JUDGE_EVERY * JUDGMENTS, as_is=still, sharp=still / 2))


def test_the_feed_shows_its_pairs_sharpened_only_once_it_sharpens_and_never_a_night_cameras():
    feed, pair = KNOWN_MOTION.feed(seed=0), pair_of(32, 32)
    step_input, _ = feed(pair)
    assert torch.equal(step_input[:1], pair) and not feed.reads["sharpened_frames"]
    feed.sharpening.sharpens = True
    step_input, _ = feed(pair)
    assert torch.equal(step_input[:1], sharpened(pair)) and feed.reads["sharpened_frames"]
    feed.noise.noisy, feed.noise.reading, feed.noise.level = True, torch.tensor(1.0), torch.tensor(0.02)
    step_input, _ = feed(pair)
    assert not torch.equal(step_input[:1], sharpened(pair)) and not feed.reads["sharpened_frames"]
