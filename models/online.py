"""The online-learning set-up shared by the service and the bench: one frame pair, one step.

Two ways to learn (``Learning``): a learner that starts from the shipped weights learns from pairs with a known flow
made of the stream's own frames (``KNOWN_MOTION``, ``models.known_motion``), each step's input the pair it shows and
the pair it learns from, side by side in a batch of two; a learner from scratch (PARTIME's research setting) learns
from the photometric loss of the pair it shows (``PHOTOMETRIC``). ``learning_for(init)`` picks one.

Why one module: the optimiser, its learning rate for a D-stage pipeline and the frame-pair tensor
must be identical wherever flow is learned, or bench numbers would not describe the service.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from pipeline_core import Pipeline, Schedule, StepResult
from pipeline_core.partition import only_shown
from pipeline_core.stage import GradAlign, LossFn, learned_part

from .feeds import KNOWN_HOLD, Feed, KnownMotionFeed
from .flow_loss import guarded_flow_loss, nan_if_blown_up, online_zero_flow_loss
from .known_motion import known_flow_loss
from .prior_adam import PriorAdam
from .scene_cuts import SceneCuts
from .stale_gradient import motion_aligned

OptimizerFactory = Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer]

#: Adam learning rate of a sequential (one-stage) learner from scratch: it must find flow within the first
#: hundred frames; slower rates learned later, faster ones no better (``bench.flow`` measures it).
BASE_LR = 4e-3


#: Adam rate of the convolutions of a learner that starts from the shipped pretrained weights and learns from known
#: motion (``KNOWN_MOTION``); its scalar priors learn ``PRIOR_SCALE`` times faster. At 1e-4 the convolutions moved
#: the flow of a real clip's moving pixels away from the truth (tree: 1.10x its frozen start over the clip); at 3e-5
#: they kept it (0.995x) and a night stream still learned (0.87x over its last 100 pairs): the
#: [notebook](../docs/notebook/2026-11-28-learning-while-watching-from-known-motion.md).
ADAPT_LR = 3e-5
#: How many times faster than the convolutions the nets' scalar priors learn from known motion (the Lucas-Kanade
#: dampings, the matches' temperatures): a few numbers that the stream's noise, contrast and light decide, learned from
#: every pixel of every pair. At 300 the flicker streams' gains fell short (colorwheel 0.85x frozen); at 1,000,
#: warmed up over 200 steps and anchored, they gained more (0.81x) and real clips' moving pixels stayed within 1.02x
#: (``docs/notebook/2026-12-01-the-priors-anchored-the-half-level-slower.md``); unanchored and warmed up over 100
#: steps 1,000 moved them 1.03-1.05x (``docs/notebook/2026-11-29-an-oracle-bounds-learning.md``).
PRIOR_SCALE = 1000.0
#: Steps over which the priors' rate grows to its full value: Adam's first steps are each a whole rate, and at
#: ``PRIOR_SCALE`` they moved the flow of a real clip's first pairs (``models.prior_adam``; over 100 steps tree's
#: moving pixels 1.02x their frozen start's error over its 60 pairs, over 200 1.006x).
PRIOR_WARMUP = 200
#: How hard the priors are pulled back toward their start after each step: ``lr * PRIOR_ANCHOR`` of the way, 1 % a
#: step at the priors' full rate (``models.prior_adam``). Unanchored, a night stream's error wandered to 1.03x its
#: frozen start's over some 100 of its 1,500 pairs; anchored, within 1.014x. Pulled harder (3-5 %) the exact-flow
#: streams lost most of what the priors buy (coffee clean 0.95x frozen against 0.92x).
PRIOR_ANCHOR = 1.0 / 3.0
#: How fast each level's convolutions learn from known motion, a share of ``ADAPT_LR`` by the level's factor; a level
#: not named (the 1/8 and 1/4) keeps its convolutions as shipped (its scalar priors learn). Learning the coarse levels
#: moved a real clip's moving pixels away from the truth (carphone: 1.028x its frozen start over the clip) and bought
#: the exact-flow streams little (``docs/notebook/2026-11-29-the-coarse-levels-convolutions-stay-as-shipped.md``); the
#: 1/2 level's match at the full rate moved carphone's 1.024x, at 0.3 1.008x, as shipped the exact-flow gains went
#: (astronaut 0.97x frozen against 0.95x: ``docs/notebook/2026-12-01-the-priors-anchored-the-half-level-slower.md``).
CONV_RATES = {1: 1.0, 2: 0.3}
#: How many times faster the priors learn, unanchored, on a stream that reaches the net through a starved block codec
#: (``KnownMotionFeed``). With made pairs through a codec, coffee's H.264 stream over its last 100 pairs: 0.96 of its
#: frozen start with the priors anchored at 3,000x, 0.91 unanchored at 1,000x, 0.85 unanchored at 3,000x
#: (docs/notebook/2026-12-06-made-pairs-through-a-codec-for-a-starved-stream.md).
STARVED_PRIOR_BOOST = 3.0
#: The attribute ``Learning.prepare`` sets on a convolution's parameters that learn at a share of the rate (a
#: pipeline's copies of the layers keep it: ``pipeline_core.partition.copy_layer``); ``flow_optimizer`` groups by it.
LR_SHARE = "lr_share"


def is_prior(p: nn.Parameter) -> bool:
    """Whether ``p`` is one of the nets' scalar priors (a match's temperature, a damping, the still gate's margin): one
    number, learned ``PRIOR_SCALE`` times faster than the convolutions and never left out of learning."""
    return p.dim() == 0


def flow_optimizer(
    lr: float = BASE_LR,
    fused: bool = True,
    prior_scale: float | None = None,
    prior_warmup: int | None = None,
    prior_anchor: float | None = None,
    rate_scale: float = 1.0,
) -> OptimizerFactory:
    """Adam factory (one optimiser per pipeline stage). beta2 = 0.99: on a non-stationary stream the
    second-moment estimate must forget within ~100 frames, or a burst of large gradients (a fast
    patch entering) keeps the step size wrong for a long time. ``fused``: one kernel updates every parameter (the
    same update); torch's default on CPU loops over the flow nets' ~40 small tensors one op at a time
    (``python -m bench.learning_step`` times both: ways eager-1t and adam-loop-1t). On CUDA it is also capturable
    (its step counts live on the device), so a CUDA graph can hold the whole learning step. ``prior_scale``: the
    scalar parameters (the priors) learn at that multiple of ``lr`` (a group's ``lr_scale``, which
    ``Pipeline.set_lr`` keeps); ``prior_warmup``: their steps grow to that rate over so many steps; ``prior_anchor``:
    after each step they move ``lr * prior_scale * prior_anchor`` of the way back to their start
    (``models.prior_adam``). With ``prior_scale``, a weight tagged with a share of the rate (``LR_SHARE``) learns in a
    group at that share. ``rate_scale``: every group learns at that multiple of its rate (kept in its ``lr_scale``, so
    ``Pipeline.set_lr`` and a saved optimizer state keep it too)."""

    def make(params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
        params = list(params)
        on_cuda = any(p.device.type == "cuda" for p in params)
        groups: list[dict] = [{"params": params} | ({"lr_scale": rate_scale} if rate_scale != 1.0 else {})]
        if prior_scale is not None:
            by_share: dict[float, list[nn.Parameter]] = {}
            for p in params:
                if not is_prior(p):
                    by_share.setdefault(getattr(p, LR_SHARE, 1.0), []).append(p)
            groups = [
                {"params": weights} | ({"lr_scale": share * rate_scale} if share * rate_scale != 1.0 else {})
                for share, weights in sorted(by_share.items(), reverse=True)
            ]
            fast = {"lr_scale": prior_scale * rate_scale, "warmup": prior_warmup, "anchor": prior_anchor}
            priors = [p for p in params if is_prior(p)]
            groups.append({k: v for k, v in fast.items() if v is not None} | {"params": priors})
            groups = [g for g in groups if g["params"]]
        for g in groups:
            g["lr"] = lr * g.get("lr_scale", 1.0)
        options = {"lr": lr, "betas": (0.9, 0.99), "fused": fused or None, "capturable": on_cuda}
        plain = prior_warmup is None and prior_anchor is None
        return (torch.optim.Adam if plain else PriorAdam)(groups, **options)

    return make


def frame_pair(prev: np.ndarray, cur: np.ndarray, device: str | torch.device = "cpu") -> torch.Tensor:
    """Two uint8 RGB frames [H, W, 3] -> (1, 6, H, W) float tensor in [0, 1] (previous, current)."""
    prev, cur = np.asarray(prev), np.asarray(cur)
    if prev.shape != cur.shape or prev.ndim != 3 or prev.shape[2] != 3:
        raise ValueError(f"frames must both be [H, W, 3], got {prev.shape} and {cur.shape}")
    pair = np.concatenate([prev, cur], axis=2).transpose(2, 0, 1)
    return torch.from_numpy(np.ascontiguousarray(pair)).to(device=device, dtype=torch.float32).div_(255.0)[None]


def stream_pairs(frames: Iterable[np.ndarray]) -> Iterator[torch.Tensor]:
    """Consecutive uint8 RGB frames as the learner's pairs (``frame_pair``); a frame that begins a new shot is paired
    with itself, as the service pairs it (``models.scene_cuts``)."""
    cuts, previous = SceneCuts(), None
    for frame in frames:
        cut = cuts(frame)
        if previous is not None:
            yield frame_pair(frame if cut else previous, frame)
        previous = frame


def guarded_known_flow_loss(output: Tensor, target: Tensor) -> Tensor:
    """``known_flow_loss``, NaN where the flow blew up (as ``guarded_flow_loss``: the learner then restores its last
    good weights)."""
    return nan_if_blown_up(known_flow_loss, output, target)


@dataclass(frozen=True)
class Learning:
    """What a learner learns from and at what rate (the module docstring): its loss, its optimizer's rates, how a
    stale stage treats an older gradient, whether the coarse levels add their own photometric losses, and the feed
    that makes each step's input."""

    name: str
    lr: float
    loss_fn: LossFn
    align_stale_grad: GradAlign | None
    prior_scale: float | None
    deep_supervision: bool
    known_motion: bool
    prior_warmup: int | None = None  # steps over which the priors' rate grows to its full value
    prior_anchor: float | None = None  # how hard the priors are pulled back toward their start after each step
    conv_rates: Mapping[int, float] | None = None  # each level's convolutions' share of the rate; unnamed: as shipped

    def feed(self, seed: int = 0, stages: int = 1) -> Feed:
        """The feed of a learner split into ``stages`` (``KnownMotionFeed``)."""
        return KnownMotionFeed(seed, stages, self.prior_options(stages)) if self.known_motion else Feed()

    def prior_options(self, stages: int) -> dict[bool, dict[str, float]] | None:
        """The priors' optimizer options (``PRIOR_GROUP``) of a learner split into ``stages``, on a stream that does
        not (False) and does (True) reach it through a starved codec (``KnownMotionFeed``): there they learn
        ``STARVED_PRIOR_BOOST`` times faster, unanchored. None where the priors have no group of their own."""
        if self.prior_scale is None or self.prior_anchor is None:
            return None
        rate = self.prior_scale * self.stage_rate(stages)
        return {False: {"lr_scale": rate, "anchor": self.prior_anchor},
                True: {"lr_scale": rate * STARVED_PRIOR_BOOST, "anchor": 0.0}}  # fmt: skip

    def sample(self, pair: Tensor) -> Tensor:
        """The pipeline's sample input for a real pair (1, 6, H, W)."""
        return torch.cat([pair, pair]) if self.known_motion else pair

    def optimizer(self, lr: float | None = None, fused: bool = True, stages: int = 1) -> OptimizerFactory:
        """The optimizer of each stage of a learner split into ``stages``, at ``lr`` (``stage_rate``'s multiple)."""
        return flow_optimizer(
            self.lr if lr is None else lr,
            fused=fused,
            prior_scale=self.prior_scale,
            prior_warmup=self.prior_warmup,
            prior_anchor=self.prior_anchor,
            rate_scale=self.stage_rate(stages),
        )

    def stage_rate(self, stages: int) -> float:
        """How much faster than its rate a learner split into ``stages`` steps: learning from known motion, its feed
        serves each made pair ``stages - 1`` pairs more known nowhere (``KnownMotionFeed``), so only ``KNOWN_HOLD`` of
        every ``KNOWN_HOLD + stages - 1`` steps teach it; it steps faster by their inverse, to learn as much per frame
        as one stage. At the rate of one stage, D = 2 lagged D = 1 by 4-6 % over a flickering stream at 256x256, as far
        as a D = 1 learner served the same steps known nowhere (the share of steps that teach, not the gradient's age:
        docs/notebook/2026-12-02-what-holds-d-2-back-at-256.md); 5/4 as fast, by 2-4 % (1.018, 1.021 and 1.034 over
        three draws, docs/notebook/2026-12-03-d-2-steps-faster-by-its-untaught-share.md; the last is
        bench/results/adaptation-heldout-256/rocket-11-flicker.md)."""
        return (KNOWN_HOLD + stages - 1) / KNOWN_HOLD if self.known_motion else 1.0

    @property
    def shown(self) -> int:
        """How many leading samples of a step's input are only shown (``Pipeline``'s ``shown``): the real pair, where
        the learner learns from another."""
        return 1 if self.known_motion else 0

    def learned_part(self, net: nn.Sequential) -> nn.Sequential:
        """What of ``net`` the pair learned from passes (``pipeline_core.stage.learned_part``), as the frozen start
        scores that pair too."""
        return learned_part(net, self.shown)

    def frozen_start(self, net: nn.Sequential) -> nn.Sequential:
        """A frozen copy of ``net``, the weights a stream begins with: whole, it runs the judgments the stream's feed
        asks for (``Feed.judgment``); its ``learned_part`` scores the pairs learned from now and then (the service's
        ``versus_start``)."""
        return copy.deepcopy(net).eval().requires_grad_(False)

    def zero_flow_loss(self, step_input: Tensor, target: Tensor) -> Tensor:
        """The loss zero flow would have on a step's input (0-d): the baseline a learned flow must beat."""
        if self.known_motion:
            return known_flow_loss(torch.zeros_like(step_input[-1:, :2]), target)
        return online_zero_flow_loss(step_input)

    def prepare(self, net: nn.Sequential) -> nn.Sequential:
        """``net`` with its layers' own losses on or off (``models.deep_supervision``), the convolutions of each level
        at its share of the rate (``conv_rates``: tagged ``LR_SHARE``) or, a level not named, left out of learning (no
        gradient, no optimizer: their scalar priors still learn), as are, where the pair shown is not the one learned
        from, the layers only it passes (``pipeline_core.partition.only_shown``: no gradient reaches them)."""
        for layer in net:
            if not self.deep_supervision and hasattr(layer, "supervision"):
                layer.supervision = 0.0
            if self.conv_rates is not None:
                share = self.conv_rates.get(getattr(layer, "factor", 1))
                for p in layer.parameters():
                    if share is None:
                        p.requires_grad_(is_prior(p))
                    elif share != 1.0 and not is_prior(p):
                        setattr(p, LR_SHARE, share)
            if self.shown and only_shown(layer):
                layer.requires_grad_(False)
        return net


#: A learner from scratch: the photometric loss of the pair it shows (with the coarse levels' own), every parameter at
#: ``BASE_LR``, a stale gradient moved with the flow.
PHOTOMETRIC = Learning("photometric", BASE_LR, guarded_flow_loss, motion_aligned, None, True, False)
#: A learner from the shipped weights: the end-point error on pairs of known motion (``models.known_motion``), the
#: convolutions of the 1/2 and full-resolution levels at their ``CONV_RATES`` share of ``ADAPT_LR`` and the priors
#: ``PRIOR_SCALE`` times faster, warmed up over ``PRIOR_WARMUP`` steps and anchored to their start
#: (``PRIOR_ANCHOR``); the layers only the shown pair passes (the still gate, the variational refinement) as shipped.
KNOWN_MOTION = Learning(
    "known-motion",
    ADAPT_LR,
    guarded_known_flow_loss,
    None,
    PRIOR_SCALE,
    False,
    True,
    prior_warmup=PRIOR_WARMUP,
    prior_anchor=PRIOR_ANCHOR,
    conv_rates=CONV_RATES,
)


def learning_for(init: str) -> Learning:
    """How a learner that starts ``init`` (``models.flow_nets.INITS``, or a weights file: adapting) learns."""
    return PHOTOMETRIC if init == "scratch" else KNOWN_MOTION


def default_lr(init: str) -> float:
    """The base rate for a learner that starts ``init``."""
    return learning_for(init).lr


def online_pipeline(
    model: nn.Sequential,
    sample: torch.Tensor,
    stages: int,
    lr: float | None = None,
    *,
    learning: Learning = PHOTOMETRIC,
    loss_fn: LossFn | None = None,
    layers: list[int] | None = None,
    devices: list[str | torch.device] | None = None,
    schedule: str | Schedule = "partime",
    optimizer: OptimizerFactory | None = None,
    align_stale_grad: GradAlign | None | str = "learning",
    compile_backend: str | None = None,
    cuda_graph: bool | None = None,
    runtime: str = "local",
    start_method: str | None = None,
    start_early: bool = False,
    timeout: float | None = None,
) -> Pipeline:
    """The service's learner around ``model``, learning as ``learning`` says (``Learning``: its loss, optimizer, rate
    and stale-gradient rule unless ``loss_fn``, ``optimizer``, ``lr`` or ``align_stale_grad`` (None: as it was sent,
    PARTIME as published) say otherwise), on inputs shaped as ``learning.sample(sample)`` for a real pair ``sample``:
    ``stages`` stages split by measured layer costs (unless ``layers`` gives the split; ``Pipeline`` profiles it
    otherwise), one Adam per stage, every stage at ``lr`` (times ``learning.stage_rate(stages)``). ``compile_backend``
    and ``cuda_graph`` go to ``Pipeline`` (on CUDA whole-step graphs are on by default), as do ``runtime``,
    ``start_method`` and ``start_early`` (where the stages run, and when) and ``timeout`` (how long a step may take;
    None: the engine's default. A stage process that compiles at its first step takes minutes).

    Why one rate for every stage, stale or not: Adam already normalises each step, and a PARTIME stage's gradients are
    only 2(D-1-h) frames old; scaling a stale stage's rate down by its delay (base / (1 + delay), PipeMare's rule,
    used here before) slowed its learning more than the staleness hurt it (``bench.flow``'s PARTIME lanes, D = 2 and
    4: ``bench/results/flow-*.md``).

    Why one function: the service's worker and the benchmarks build their learners here, so a benchmark
    measures what the service runs."""
    lr = learning.lr if lr is None else lr
    pipe = Pipeline(
        learning.prepare(model),
        learning.sample(sample),
        stages=stages,
        balance=layers,
        devices=devices,
        loss_fn=loss_fn or learning.loss_fn,
        optimizer=optimizer or learning.optimizer(lr, stages=stages),
        schedule=schedule,
        align_stale_grad=learning.align_stale_grad if align_stale_grad == "learning" else align_stale_grad,
        compile_backend=compile_backend,
        cuda_graph=cuda_graph,
        runtime=runtime,
        start_method=start_method,
        start_early=start_early,
        shown=learning.shown,
        **({} if timeout is None else {"timeout": timeout}),
    )
    pipe.set_lr(lr)  # also when ``optimizer`` is given: ``lr`` is every stage's rate whatever the factory's default
    return pipe


def predict_then_learn(
    pipe: Pipeline, pairs: Iterable[torch.Tensor], feed: Feed | None = None, start: nn.Module | None = None
) -> Iterator[StepResult]:
    """Feed each frame pair once, in order, as ``feed`` makes it a step's input and target (by default the pair alone,
    its own target); yield every step's result, then the flush's, each output as the stream shows it (``Feed.show``):
    ``shown(r.output)`` is the pair's flow. ``start`` (``Learning.frozen_start``) runs each judgment the feed asks for
    after its step (``Feed.judgment``; the service runs them with its frozen start's scorings).

    Scoring ``shown(r.output)`` against pair ``r.frame`` is prequential: no weight that produced the output has
    learned from that pair (nor from a pair made of its frames). A stage records its output when it forwards, before
    that step's backward and update. With PARTIME and D stages, stage h forwards pair f at step f + h; each of its
    earlier updates, at a step s < f + h, used the loss of pair s + h - 2(D - 1) <= f - 1 - 2(D - 1 - h) < f (a
    deep-supervised layer adds its own pair s - h < f). The last stage computes pair f's loss in the step that outputs
    it, after the forward. ``tests/test_online.py`` recomputes every output from the weights each stage had when it
    forwarded.
    """
    feed = feed or Feed()
    for x in pairs:
        step_input, target = feed(x)
        r = pipe.step(step_input, target=target)
        if r.output is not None:
            feed.observe(r.output, r.readings)
            r.output = feed.show(r.output)
        feed.tune(pipe)
        judgment = feed.judgment() if start is not None else None
        if judgment is not None:
            with torch.no_grad():
                feed.judged(start(judgment))
        yield r
    for r in pipe.flush():
        if r.output is not None:
            r.output = feed.show(r.output)
        yield r
