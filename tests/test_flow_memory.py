"""``models.flow_memory``: the memory shows the net's flow until a lower gain has predicted it clearly better, then
averages away its errors from pair to pair, starts again at a still flow or another size, and reaches the flow shown
only on a starved stream."""

import numpy as np
import pytest
import torch

from models.block_codec import READ_EVERY
from models.feeds import shown
from models.flow_memory import GAINS, TRUSTED_AFTER, FlowMemory, carried
from models.online import KNOWN_MOTION
from tests.codec_support import stream

H, W, BLOCK = 48, 64, 16
TRUTH = torch.tensor([1.5, -0.5])[None, :, None, None].expand(1, 2, H, W)


def block_errors(rng: np.random.Generator, size: float = 0.5) -> torch.Tensor:
    """The true flow with an error of each 16x16 block drawn afresh for each pair, as a net reads the blocks a starved
    encoder coded or left as they were, pair by pair."""
    errors = torch.from_numpy(rng.normal(0, size, (1, 2, H // BLOCK, W // BLOCK))).float()
    return TRUTH + errors.repeat_interleave(BLOCK, 2).repeat_interleave(BLOCK, 3)


def error(flow: torch.Tensor) -> float:
    return float((flow - TRUTH).norm(dim=1).mean())


def test_carrying_moves_the_remembered_flow_with_the_picture():
    memory = torch.zeros(1, 2, H, W)
    memory[0, 0, :, 10] = 3.0  # a column remembered moving
    moved = carried(memory, torch.full((1, 2, H, W), 0.0).index_fill(1, torch.tensor([0]), 2.0))
    assert torch.allclose(moved[0, 0, :, 12], torch.full((H,), 3.0)) and float(moved[0, 0, :, 10].abs().max()) == 0


def test_errors_from_pair_to_pair_are_averaged_away_once_a_lower_gain_predicts_better():
    memory, rng, errors_net, errors_shown = FlowMemory(), np.random.default_rng(0), [], []
    for _ in range(80):
        net = block_errors(rng)
        out = memory(net)
        errors_net.append(error(net)), errors_shown.append(error(out))
    assert errors_shown[:TRUSTED_AFTER] == errors_net[:TRUSTED_AFTER]  # the net's own flow while no gain is trusted
    assert np.mean(errors_shown[-40:]) < 0.6 * np.mean(errors_net[-40:])
    assert int(memory.errors.argmin()) > 0 and float(memory.errors.min()) < float(memory.errors[0])


def test_a_flow_that_the_memory_predicts_no_better_is_shown_as_the_net_gives_it():
    """A flow changing from pair to pair as a real scene's may: every gain but 1 predicts it worse."""
    memory = FlowMemory()
    for t in range(60):
        net = TRUTH * (1 + 0.5 * np.sin(t))
        assert torch.equal(memory(net), net)
    assert int(memory.errors.argmin()) == 0


def test_a_still_flow_starts_the_memory_again():
    """A frame paired with itself (a new shot) shows no motion: what the memory had is not carried into it."""
    memory, rng = FlowMemory(), np.random.default_rng(1)
    for _ in range(60):
        memory(block_errors(rng))
    still = torch.zeros(1, 2, H, W)
    assert torch.equal(memory(still), still)
    assert torch.equal(memory.memory, still.expand(len(GAINS), -1, -1, -1))


def test_another_size_or_a_reset_starts_afresh():
    memory, rng = FlowMemory(), np.random.default_rng(2)
    for _ in range(30):
        memory(block_errors(rng))
    smaller = torch.ones(1, 2, H // 2, W // 2)
    assert torch.equal(memory(smaller), smaller) and memory.predictions == 0
    memory.reset()
    assert memory.memory is None and memory.errors is None


@pytest.mark.parametrize("starved", [True, False])
def test_only_a_starved_streams_flow_goes_through_the_memory(starved, monkeypatch):
    """``KnownMotionFeed.show`` replaces the pair shown's flow (sample 0) by the memory's once the stream reads as
    starved; the made pair's output is left as it was; a stream not starved is shown as the net gives it."""
    feed = KNOWN_MOTION.feed(seed=0)
    calls = []
    monkeypatch.setattr(type(feed.memory), "__call__", lambda self, flow: calls.append(flow) or flow + 1.0)
    for pair in stream(starved_grid=True, skips=starved, pairs=READ_EVERY + 1):
        feed(pair)
    assert feed.starved_codec is starved
    output = torch.randn(2, 2, *pair.shape[-2:])
    shown_output = feed.show(output)
    assert torch.equal(shown_output[1:], output[1:])
    assert torch.equal(shown(shown_output), shown(output) + 1.0 if starved else shown(output))
    assert len(calls) == int(starved)
