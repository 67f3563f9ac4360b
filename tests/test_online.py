"""Prequential scoring is exact: a pipeline's output for pair f was produced before anything learned from pair f; and
what each way of learning learns."""

import pytest
import torch

from models.feeds import Feed
from models.flow_nets import build_flow_net
from models.online import (
    CONV_RATES,
    KNOWN_MOTION,
    PHOTOMETRIC,
    PRIOR_SCALE,
    frame_pair,
    online_pipeline,
    predict_then_learn,
)
from models.stale_gradient import motion_aligned
from models.streams import generate
from pipeline_core.partition import only_shown

SPLITS = {1: None, 2: [11, 7], 3: [8, 3, 7]}  # the fast net: coarse levels, then the full-resolution level


def outputs_by_pair(stages: int, pairs: list[torch.Tensor], targets: list[torch.Tensor]) -> dict[int, torch.Tensor]:
    torch.manual_seed(0)
    outputs = {}
    with online_pipeline(build_flow_net("fast", init="scratch"), pairs[0], stages, layers=SPLITS[stages]) as pipe:
        results = [pipe.step(x, target=y) for x, y in zip(pairs, targets, strict=True)] + pipe.flush()
        for r in results:
            if r.frame is not None:
                assert r.frame not in outputs
                outputs[r.frame] = r.output
    return outputs


@pytest.mark.parametrize("stages", [1, 2, 3])
def test_output_for_a_pair_does_not_depend_on_that_pairs_loss(stages, one_intra_op_thread):
    stream = generate(size=32, frames=8, seed=1)
    pairs = [frame_pair(stream.frames[t], stream.frames[t + 1]) for t in range(len(stream.flow))]
    f = 3
    wrong = list(pairs)
    wrong[f] = torch.roll(pairs[f], shifts=(3, -2), dims=(2, 3))  # pair f is learned from another target
    honest, altered = outputs_by_pair(stages, pairs, pairs), outputs_by_pair(stages, pairs, wrong)
    assert sorted(honest) == list(range(len(pairs)))
    for g in range(f + 1):  # up to pair f itself: identical, bit for bit
        assert torch.equal(honest[g], altered[g]), g
    assert not torch.equal(honest[f + 1], altered[f + 1])  # pair f's loss did reach the weights (the check can fail)


def test_predict_then_learn_yields_every_pair_once_in_order():
    stream = generate(size=32, frames=6, seed=2)
    pairs = [frame_pair(stream.frames[t], stream.frames[t + 1]) for t in range(len(stream.flow))]
    torch.manual_seed(0)
    with online_pipeline(build_flow_net("fast", init="scratch"), pairs[0], 2, layers=SPLITS[2]) as pipe:
        results = list(predict_then_learn(pipe, iter(pairs)))
    assert len(results) == len(pairs) + 1  # D - 1 = 1 filling step without output, then one flush step
    assert [r.frame for r in results if r.frame is not None] == list(range(len(pairs)))
    assert all(r.output.shape == (1, 2, 32, 32) and r.loss is not None for r in results if r.frame is not None)


class Marking(Feed):
    """Shows each output with its order number added, to see which outputs went through ``show``, in what order."""

    def __init__(self) -> None:
        self.shows = 0

    def show(self, output: torch.Tensor) -> torch.Tensor:
        self.shows += 1
        return torch.full_like(output, float(self.shows))


def test_every_output_the_stream_gets_is_shown_by_the_feed_the_flushs_too():
    stream = generate(size=32, frames=6, seed=2)
    pairs = [frame_pair(stream.frames[t], stream.frames[t + 1]) for t in range(len(stream.flow))]
    torch.manual_seed(0)
    feed = Marking()
    with online_pipeline(build_flow_net("fast", init="scratch"), pairs[0], 2, layers=SPLITS[2]) as pipe:
        outputs = [r.output for r in predict_then_learn(pipe, iter(pairs), feed) if r.output is not None]
    assert feed.shows == len(pairs) and [float(o.mean()) for o in outputs] == list(range(1, len(pairs) + 1))


class Judging(Feed):
    """Asks for a judgment of its pair every second pair and keeps what the start gave back."""

    def __init__(self) -> None:
        self.pairs, self.pending, self.got = 0, None, []

    def __call__(self, pair: torch.Tensor, contiguous: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        self.pairs += 1
        self.pending = pair.clone() if self.pairs % 2 == 0 else None
        return pair, pair

    def judgment(self) -> torch.Tensor | None:
        pending, self.pending = self.pending, None
        return pending

    def judged(self, flows: torch.Tensor) -> None:
        self.got.append(flows)


def test_the_frozen_start_runs_each_judgment_the_feed_asks_for_and_learns_nothing():
    stream = generate(size=32, frames=6, seed=2)
    pairs = [frame_pair(stream.frames[t], stream.frames[t + 1]) for t in range(len(stream.flow))]
    torch.manual_seed(0)
    net, feed = build_flow_net("fast", init="scratch"), Judging()
    start = PHOTOMETRIC.frozen_start(net)
    with torch.no_grad():
        expected = [start(pairs[t]) for t in (1, 3)]
    with online_pipeline(net, pairs[0], 1, layers=SPLITS[1]) as pipe:
        list(predict_then_learn(pipe, iter(pairs), feed, start))
    assert len(feed.got) == 2 and all(torch.equal(a, b) for a, b in zip(feed.got, expected, strict=True))
    assert not any(p.requires_grad for p in start.parameters())


def test_the_learner_moves_stale_gradients_with_the_flow_unless_told_not_to():
    sample = torch.zeros(1, 6, 16, 16)
    with online_pipeline(build_flow_net("fast", init="scratch"), sample, 2, layers=SPLITS[2]) as pipe:
        assert all(s.align_stale_grad is motion_aligned for s in pipe.stages)
    with online_pipeline(
        build_flow_net("fast", init="scratch"), sample, 2, layers=SPLITS[2], align_stale_grad=None
    ) as pipe:
        assert all(s.align_stale_grad is None for s in pipe.stages)


@pytest.mark.parametrize("stages", [1, 2])
def test_the_known_motion_learner_leaves_the_coarse_levels_convolutions_as_shipped(stages, one_intra_op_thread):
    """Their scalar priors and every finer level's weights learn, each level's at its share of the rate; no stage's
    optimizer holds a coarse convolution, nor a weight of a layer only the shown pair passes."""
    shipped = build_flow_net("fast", init="pretrained")
    factor = {name: getattr(layer, "factor", 1) for name, layer in shipped.named_children()}
    stream = generate(size=32, frames=8, seed=3)
    pairs = [frame_pair(stream.frames[t], stream.frames[t + 1]) for t in range(len(stream.flow))]
    torch.manual_seed(0)
    with online_pipeline(build_flow_net("fast", init="pretrained"), pairs[0], stages, learning=KNOWN_MOTION,
                         layers=SPLITS[stages]) as pipe:  # fmt: skip
        list(predict_then_learn(pipe, iter(pairs), KNOWN_MOTION.feed(0, stages)))
        optimized = {id(p) for s in pipe.stages for g in s.optimizer.param_groups for p in g["params"]}
        held = {n for s in pipe.stages for n, p in s.module.named_parameters() if id(p) in optimized}
        groups = [g for s in pipe.stages for g in s.optimizer.param_groups]
        scale = {id(p): g.get("lr_scale", 1.0) for g in groups for p in g["params"]}
        shares = {n: scale[id(p)] for s in pipe.stages for n, p in s.module.named_parameters() if id(p) in scale}
        learned = dict(pipe.module().named_parameters())
    moved = {n for n, p in shipped.named_parameters() if not torch.equal(p, learned[n])}
    coarse = {n for n, p in shipped.named_parameters() if factor[n.split(".")[0]] not in CONV_RATES}
    coarse_convs = {n for n in coarse if shipped.get_parameter(n).dim() > 0}
    assert coarse_convs and not coarse_convs & (moved | held)
    assert coarse - coarse_convs <= moved  # the coarse levels' priors learned
    assert {n for n, p in shipped.named_parameters() if p.dim() > 0 and n not in coarse} & moved  # so did finer convs
    finer = {n: CONV_RATES[factor[n.split(".")[0]]] for n in held if shipped.get_parameter(n).dim() > 0}
    faster = KNOWN_MOTION.stage_rate(stages)  # every group steps faster by the share of steps that teach it
    assert set(finer.values()) == set(CONV_RATES.values())
    assert all(shares[n] == pytest.approx(share * faster) for n, share in finer.items())
    # The layers only the shown pair passes (the still gate) learn nothing, and sit in no optimizer.
    only = {n for n, _ in shipped.named_parameters() if only_shown(shipped.get_submodule(n.split(".")[0]))}
    assert only and not only & (moved | held)


@pytest.mark.parametrize("stages", [1, 2, 3])
def test_a_known_motion_learner_steps_faster_by_the_share_of_its_steps_that_teach_it(stages, one_intra_op_thread):
    """Its feed serves a made pair known nowhere on some steps (``KnownMotionFeed``); every stage's every group steps
    faster by the inverse of the share of steps that teach, and a new rate keeps that (``Pipeline.set_lr``)."""
    stream = generate(size=32, frames=3, seed=4)
    pair = frame_pair(stream.frames[0], stream.frames[1])
    feed = KNOWN_MOTION.feed(0, stages)
    teaching = []
    for _ in range(240):  # whole cycles of its two slots' servings, for 1-3 stages
        feed(pair)
        teaching.append(feed.learns)
    assert KNOWN_MOTION.stage_rate(stages) == pytest.approx(len(teaching) / sum(teaching))
    assert PHOTOMETRIC.stage_rate(stages) == 1.0  # its every step teaches
    with online_pipeline(build_flow_net("fast", init="pretrained"), pair, stages, learning=KNOWN_MOTION,
                         layers=SPLITS[stages]) as pipe:  # fmt: skip
        for lr in (KNOWN_MOTION.lr, 1e-6):
            pipe.set_lr(lr)
            rates = {g["lr"] for s in pipe.stages for g in s.optimizer.param_groups}
            expected = {lr * KNOWN_MOTION.stage_rate(stages) * share for share in (*CONV_RATES.values(), PRIOR_SCALE)}
            assert sorted(rates) == pytest.approx(sorted(expected))


class Recording(Feed):
    """A feed that keeps the made pair of every input it makes."""

    def __init__(self, feed: Feed) -> None:
        self.feed, self.made = feed, []

    def __call__(self, pair: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        step_input, target = self.feed(pair)
        self.made.append(step_input[-1])
        return step_input, target

    def observe(self, output: torch.Tensor, readings=None) -> None:
        self.feed.observe(output, readings)


def test_at_d_2_the_first_stage_pushes_no_made_pairs_gradient_through_another(one_intra_op_thread):
    """PARTIME's first stage of two pushes through each step's pair the gradient of the pair two steps before: the same
    made pair, or, where the feed made one afresh, the one before it, served known nowhere, whose gradient is zero
    (``KnownMotion``'s ``unknown``). Without that serving, the old pair's gradient went through the new one."""
    stream = generate(size=32, frames=15, seed=3)
    pairs = [frame_pair(stream.frames[t], stream.frames[t + 1]) for t in range(len(stream.flow))]

    def pushed(stages_of_feed: int) -> tuple[list[bool], list[bool]]:
        """Per stale push of the first stage: whether its made pair's gradient was zero, and whether the pair it was
        pushed through was another than the one it came from."""
        feed, zero = Recording(KNOWN_MOTION.feed(0, stages_of_feed)), []

        def spy(output: torch.Tensor, grad: torch.Tensor, frames_apart: int) -> torch.Tensor:
            zero.append(bool((grad[-1] == 0).all()))
            return grad

        torch.manual_seed(0)
        with online_pipeline(build_flow_net("fast", init="pretrained"), pairs[0], 2, learning=KNOWN_MOTION,
                             layers=SPLITS[2], align_stale_grad=spy) as pipe:  # fmt: skip
            list(predict_then_learn(pipe, iter(pairs), feed))
        # The first stage's stale pushes are for frames 2, 3, ... (the gradient of frame f - 2 through frame f).
        other = [not torch.equal(feed.made[f], feed.made[f - 2]) for f in range(2, 2 + len(zero))]
        return zero, other

    zero, other = pushed(2)
    assert any(other) and not all(zero)  # the feed made new pairs; most pushes carried a gradient
    assert all(z for z, o in zip(zero, other, strict=True) if o)
    zero, other = pushed(1)  # a feed for one stage: the old pair's gradient goes through the new one
    assert any(o and not z for z, o in zip(zero, other, strict=True))
