"""The online-learning set-up shared by the service and the bench: one frame pair, one step.

Why one module: the optimiser, its learning rate for a D-stage pipeline and the frame-pair tensor
must be identical wherever flow is learned, or bench numbers would not describe the service.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import numpy as np
import torch
from torch import nn

from pipeline_core import Pipeline, Schedule, StepResult
from pipeline_core.stage import GradAlign

from .flow_loss import guarded_flow_loss
from .scene_cuts import SceneCuts
from .stale_gradient import motion_aligned

OptimizerFactory = Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer]

#: Adam learning rate of a sequential (one-stage) learner from scratch: it must find flow within the first
#: hundred frames; slower rates learned later, faster ones no better (``bench.flow`` measures it).
BASE_LR = 4e-3


#: Adam rate of a sequential learner that starts from the shipped pretrained weights: it adapts a good prior to
#: the scene and must not wreck it. Compared on both real clips at 1e-4, 3e-5 and 1e-5 (bench/results/adapt-lr/):
#: on box (453 pairs) every faster rate moved the flow further from the pseudo ground truth (EPE 0.059 / 0.057 /
#: 0.057, moving-region F1 0.770 / 0.793 / 0.800); on tree (67 pairs) faster was slightly better (EPE 0.505 / 0.508
#: / 0.511, F1 0.826 / 0.823 / 0.819). The unsupervised loss's optimum is not the true flow, and over a long clip
#: the drift costs more than the early gain, so adapting stays this gentle. bench/results/realflow-*.md hold the
#: runs at this default.
ADAPT_LR = 1e-5


def default_lr(init: str) -> float:
    """The base rate for a learner that starts ``init`` (``models.flow_nets.INITS``, or a weights file: adapting)."""
    return BASE_LR if init == "scratch" else ADAPT_LR


def flow_optimizer(lr: float = BASE_LR, fused: bool = True) -> OptimizerFactory:
    """Adam factory (one optimiser per pipeline stage). beta2 = 0.99: on a non-stationary stream the
    second-moment estimate must forget within ~100 frames, or a burst of large gradients (a fast
    patch entering) keeps the step size wrong for a long time. ``fused``: one kernel updates every parameter (the
    same update); torch's default on CPU loops over the flow nets' ~40 small tensors one op at a time
    (``python -m bench.learning_step`` times both: ways eager-1t and adam-loop-1t). On CUDA it is also capturable
    (its step counts live on the device), so a CUDA graph can hold the whole learning step."""

    def make(params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
        params = list(params)
        on_cuda = any(p.device.type == "cuda" for p in params)
        return torch.optim.Adam(params, lr=lr, betas=(0.9, 0.99), fused=fused or None, capturable=on_cuda)

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


def online_pipeline(
    model: nn.Sequential,
    sample: torch.Tensor,
    stages: int,
    lr: float = BASE_LR,
    *,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = guarded_flow_loss,
    layers: list[int] | None = None,
    devices: list[str | torch.device] | None = None,
    schedule: str | Schedule = "partime",
    optimizer: OptimizerFactory | None = None,
    align_stale_grad: GradAlign | None = motion_aligned,
    compile_backend: str | None = None,
    cuda_graph: bool | None = None,
    runtime: str = "local",
    start_method: str | None = None,
) -> Pipeline:
    """The service's learner around ``model``: ``stages`` stages split by measured layer costs (unless ``layers``
    gives the split; ``Pipeline`` profiles it otherwise), one Adam per stage (``flow_optimizer``; or ``optimizer``),
    every stage at ``lr``, the frame pair as target, and a stale stage's gradient moved with the flow
    (``models.stale_gradient``; None: as it was sent, PARTIME as published, for comparison). ``compile_backend`` and
    ``cuda_graph`` go to ``Pipeline`` (on CUDA whole-step graphs are on by default), as do ``runtime`` and
    ``start_method`` (where the stages run).

    Why one rate for every stage, stale or not: Adam already normalises each step, and a PARTIME stage's gradients are
    only 2(D-1-h) frames old; scaling a stale stage's rate down by its delay (base / (1 + delay), PipeMare's rule,
    used here before) slowed its learning more than the staleness hurt it (``bench.flow``'s PARTIME lanes, D = 2 and
    4: ``bench/results/flow-*.md``).

    Why one function: the service's worker and the benchmarks build their learners here, so a benchmark
    measures what the service runs."""
    pipe = Pipeline(
        model,
        sample,
        stages=stages,
        balance=layers,
        devices=devices,
        loss_fn=loss_fn,
        optimizer=optimizer or flow_optimizer(lr),
        schedule=schedule,
        align_stale_grad=align_stale_grad,
        compile_backend=compile_backend,
        cuda_graph=cuda_graph,
        runtime=runtime,
        start_method=start_method,
    )
    pipe.set_lr(lr)  # also when ``optimizer`` is given: ``lr`` is every stage's rate whatever the factory's default
    return pipe


def predict_then_learn(pipe: Pipeline, pairs: Iterable[torch.Tensor]) -> Iterator[StepResult]:
    """Feed each frame pair once, in order, as its own target; yield every step's result, then the flush's.

    Scoring ``r.output`` against pair ``r.frame`` is prequential: no weight that produced the output has learned
    from that pair. A stage records its output when it forwards, before that step's backward and update. With
    PARTIME and D stages, stage h forwards pair f at step f + h; each of its earlier updates, at a step s < f + h,
    used the loss of pair s + h - 2(D - 1) <= f - 1 - 2(D - 1 - h) < f (a deep-supervised layer adds its own
    pair s - h < f). The last stage computes pair f's loss in the step that outputs it, after the forward.
    ``tests/test_online.py`` recomputes every output from the weights each stage had when it forwarded.
    """
    for x in pairs:
        yield pipe.step(x, target=x)
    yield from pipe.flush()
