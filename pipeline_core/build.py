"""Turn a model into stages and a checked schedule: the one construction path, shared by
``Pipeline`` (every stage in one controller) and ``launch`` (one stage per torchrun rank), so a
launched run computes exactly what a local one does."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .balance import balance as auto_balance
from .partition import TensorMeta, check_balance, equal_balance, split, stage_devices, trace
from .schedules import Schedule, make_schedule, validate
from .stage import GradAlign, LossFn, Stage

OptimizerFactory = Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer]


#: Schedules whose stages forward every input once, whole: they can show samples (``Stage``'s ``shown``).
SHOWING = ("sequential", "partime")


def default_optimizer(params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=1e-3)


def choose_balance(
    model: nn.Sequential,
    sample_input: Tensor,
    stages: int | None,
    balance: list[int] | None,
    devices: list[torch.device],
    loss_fn: LossFn | None,
    shown: int = 0,
) -> list[int]:
    """``balance`` checked against the model (and ``stages``), else a profiled one for ``stages``
    (default: one per device), the ``shown`` leading samples of each input forwarded as the stages will."""
    if balance is not None:
        balance = check_balance(balance, len(model))
        if stages is not None and stages != len(balance):
            raise ValueError(f"stages={stages} but balance {balance} has {len(balance)} stages")
        return balance
    stages = stages if stages is not None else len(devices)
    if stages < 1 or stages > len(model):
        raise ValueError(f"stages must be between 1 and the model's {len(model)} layers, got {stages}")
    if stages == 1:
        return equal_balance(len(model), 1)
    return auto_balance(model, sample_input, stages, devices, loss_fn, shown)


@dataclass
class Built:
    stages: list[Stage]
    schedule: Schedule
    metas: list[TensorMeta]  # shape and dtype of the pipeline input, then of every stage's output


def build(
    model: nn.Sequential,
    sample_input: Tensor,
    balance: list[int],
    devices: list[torch.device],
    optimizer: OptimizerFactory | None,
    schedule: str | Schedule,
    learn: bool,
    align_stale_grad: GradAlign | None = None,
    compile_backend: str | None = None,
    shown: int = 0,
) -> Built:
    """Split ``model`` by ``balance`` into stages placed on ``devices``, and the schedule they run,
    refused here if it cannot run on this input (``check_input``) or at all (``validate``).
    ``align_stale_grad``: see ``Stage.backward``; ``compile_backend`` and ``shown``: see ``Stage``."""
    if shown and not 0 < shown < sample_input.shape[0]:
        raise ValueError(f"shown={shown} must leave samples to learn from in a batch of {sample_input.shape[0]}")
    placed = stage_devices(devices, len(balance))
    parts = split(model, balance)
    stages = [
        Stage(i, part, dev, optimizer or default_optimizer, align_stale_grad, compile_backend, shown)
        for i, (part, dev) in enumerate(zip(parts, placed, strict=True))
    ]
    plan = make_schedule(schedule, len(stages))
    if shown and plan.name not in SHOWING:
        raise ValueError(f"schedule {plan.name!r} splits or recomputes its inputs: only {', '.join(SHOWING)} show")
    plan.check_input(tuple(sample_input.shape))
    validate(plan, learn=learn)  # a broken schedule fails here, not mid-stream
    outputs = trace([s.infer for s in stages], sample_input, [s.device for s in stages])
    return Built(stages, plan, [(tuple(sample_input.shape), sample_input.dtype), *outputs])
