"""The service's learning step through ``torch.compile`` against the eager one, on CPU: one graph per stage, the same
outputs, losses and weights.

What compiles is a stage's forward and backward: Dynamo's graph of the ``fast`` net with the custom ops
(``models.window_products``, ``models.padding``), their fake kernels and registered backwards, as AOTAutograd hands it
to a backend. The backend here is ``aot_eager``, that graph run op by op: inductor's C++ code of the same graph took
11 minutes to build cold on a 2-core machine at 64x48 (exploratory), beyond a test's budget, and
``bench.learning_step`` runs it (``bench/results/learning-step-cpu.md``).
"""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
from torch._dynamo.utils import counters

from models.flow_nets import build_flow_net
from models.online import KNOWN_MOTION, frame_pair, online_pipeline
from models.padding import replicate_pad_op
from models.streams import generate
from models.window_products import window_product_op, window_spread_op

SIZE = (64, 48)
STEPS = 8  # a guard that learning breaks (a count of steps, a state's first use) breaks within the first few
#: SGD, not the learner's Adam: Adam takes a whole step on the sign of a gradient that should be zero (a constant
#: added to both frames' features cancels) and is only rounding, so any reordering of a sum moves such a weight by the
#: rate; the optimizer is the same eager code either way. At this rate a step moves the weights by more than 1e-3
#: (``test_every_step_learns_alike`` checks it), 100 times the tolerance.
LR = 0.1


def pairs() -> list[torch.Tensor]:
    w, h = SIZE
    frames = generate(max(w, h), STEPS + 1, seed=5).frames[:, :h, :w]
    return [frame_pair(frames[i], frames[i + 1]) for i in range(STEPS)]


def weights(pipe) -> list[torch.Tensor]:
    return [p.detach().clone() for p in pipe.module().parameters()]


@pytest.fixture(scope="module")
def learned() -> dict:
    """The service's learner from the shipped weights (known motion), eager and compiled, over STEPS inputs made from
    the eager learner's flow. Before every step the compiled learner takes the eager one's weights: each step is
    compared from the same state (learning from slightly different weights, two learners drift apart by the dynamics
    of learning, not of the step). ``steps``, per step: its weights before, each way's result and weights after;
    ``traced``: what Dynamo counted while it compiled the learner (frames, graphs, graph breaks), read here rather
    than traced once more by ``torch._dynamo.explain`` (10 s)."""
    counters.clear()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    sgd = lambda params: torch.optim.SGD(params, lr=LR)  # noqa: E731
    xs = pairs()
    eager, compiled = (
        online_pipeline(build_flow_net("fast", "pretrained"), xs[0], 1, LR, learning=KNOWN_MOTION, optimizer=sgd,
                        compile_backend=backend)
        for backend in (None, "aot_eager")
    )  # fmt: skip
    feed, got = KNOWN_MOTION.feed(0), []
    for x in xs:
        step_input, target = feed(x)
        compiled.load_state_dict(eager.state_dict())
        before = weights(eager)
        a, b = eager.step(step_input, target=target), compiled.step(step_input, target=target)
        got.append({"before": before, "eager": a, "compiled": b, "eager after": weights(eager),
                    "compiled after": weights(compiled)})  # fmt: skip
        feed.observe(a.output)
    traced = {"frames": counters["frames"]["ok"], "graphs": counters["stats"]["unique_graphs"],
              "breaks": dict(counters["graph_break"])}  # fmt: skip
    eager.close(), compiled.close()
    torch.set_num_threads(threads)
    torch._dynamo.reset()
    return {"steps": got, "traced": traced}


@pytest.fixture(scope="module")
def steps(learned) -> list[dict]:
    return learned["steps"]


def test_the_compiled_step_puts_out_the_eager_flow_and_loss(steps):
    """Losses within 1e-5. Flow within 1e-5 px but at a few values (under 0.5 %), within 1e-3 px at those: the traced
    bilinear upsampling (AOTAutograd's decomposition, inductor's too) rounds in the last bit where ATen's kernel does
    not (up to 9.5e-7 px after a level's x8), and the Lucas-Kanade steps' 2x2 solves magnify that where a window is
    nearly flat: here at most 28 of a step's 12,288 values past 1e-5 px, the largest 1.2e-4 px (exploratory). A
    step that computes something else differs over a whole region, not at a few values."""
    for step in steps:
        a, b = step["eager"], step["compiled"]
        difference = (b.output - a.output).abs()
        assert (difference > 1e-5).float().mean() < 0.005
        torch.testing.assert_close(b.output, a.output, rtol=0.0, atol=1e-3)
        assert b.loss == pytest.approx(a.loss, rel=1e-5, abs=1e-5)


def test_every_step_learns_alike(steps):
    for step in steps:
        before, after = step["before"], step["eager after"]
        moved = max((a - b).abs().max().item() for a, b in zip(after, before, strict=True))
        assert moved > 1e-3
        for a, b in zip(step["eager after"], step["compiled after"], strict=True):
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)


def test_a_stage_of_the_services_net_is_one_graph(learned):
    """No graph break inside a stage: a break splits the forward and the backward where inductor cannot fuse across
    (and, on a GPU, where a CUDA graph of the compiled step would have to be cut). The whole net is the widest stage:
    the fixture's learner is one stage, which Dynamo traced twice, each time into one graph: the forward it learns
    from, and the forward without a graph of the samples only shown. A break would add a frame (the code after it)
    and a graph, and say why; a recompile over the STEPS steps would add both too."""
    traced = learned["traced"]
    assert traced["breaks"] == {}
    assert traced["frames"] == traced["graphs"] == 2, traced


def test_the_custom_ops_agree_with_their_fake_kernels():
    """What the compiler plans with (a fake kernel's shape and strides, the registered backward) is what the kernels
    do, also on a channels-last input (the layout inductor gives a net's tensors on CPU: ``models.padding``)."""
    checks = ("test_schema", "test_autograd_registration", "test_faketensor")
    a, weights = torch.randn(2, 3, 5, 6, requires_grad=True), torch.randn(2, 3, 5, 6, requires_grad=True)
    padded, offsets = torch.randn(2, 3, 7, 8, requires_grad=True), [0, 0, 1, 2, 2, 1]
    channels_last = a.detach().contiguous(memory_format=torch.channels_last).requires_grad_()
    for op, args in (
        (window_product_op, (a, padded, offsets, True)),
        (window_product_op, (weights, padded, offsets, False)),
        (window_spread_op, (weights.detach(), a.detach(), list(padded.shape), offsets)),
        (replicate_pad_op, (a, [1, 2, 0, 3])),
        (replicate_pad_op, (channels_last, [1, 2, 0, 3])),
    ):
        torch.library.opcheck(op, args, test_utils=checks)
