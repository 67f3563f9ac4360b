"""``Pipeline``: the public face of the engine. One call to :meth:`Pipeline.step` per frame."""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from .build import OptimizerFactory, build, choose_balance
from .contracts import Runtime, StepRecord
from .cuda_graph import StepGraphs
from .epoch import Epoch
from .partition import TensorMeta, check_sequential, join, resolve_devices
from .processes import ProcessRuntime
from .runtime import LocalRuntime
from .schedules import Op, Schedule, StepActions
from .stage import GradAlign, LossFn
from .worker import check_whole_frames


@dataclass
class StepResult:
    """What came out of the pipeline at one step.

    ``frame`` is the true index of the frame whose ``output`` and ``loss`` these are (PARTIME
    delays outputs by D-1 steps); all three are None while the pipeline fills.
    """

    output: Tensor | None
    loss: float | None
    frame: int | None
    step_seconds: float = 0.0
    stage_seconds: list[float | None] = field(default_factory=list)


class Pipeline:
    def __init__(
        self,
        model: nn.Sequential,
        sample_input: Tensor,
        *,
        stages: int | None = None,
        balance: list[int] | None = None,
        devices: list[str | torch.device] | None = None,
        loss_fn: LossFn | None = None,
        optimizer: OptimizerFactory | None = None,
        schedule: str | Schedule = "partime",
        cuda_graph: bool | None = None,
        timeout: float = 120.0,
        runtime: str = "local",
        align_stale_grad: GradAlign | None = None,
    ) -> None:
        """``align_stale_grad``: how a stage brings a gradient of an earlier frame into line with the frame whose
        graph it is pushed through (PARTIME's stale gradients; see ``Stage.backward``); None: as it came."""
        model = check_sequential(model)
        resolved = resolve_devices(devices)
        self.balance = choose_balance(model, sample_input, stages, balance, resolved, loss_fn)
        self.sample_input = sample_input.detach()
        self.loss_fn = loss_fn
        learn = loss_fn is not None
        built = build(model, sample_input, self.balance, resolved, optimizer, schedule, learn, align_stale_grad)
        self.stages, self.schedule = built.stages, built.schedule
        self.runtime: Runtime = self._make_runtime(runtime, built.metas, timeout)
        self._graphs = self._make_graphs(cuda_graph)
        self._epoch = Epoch(self.schedule, learn=loss_fn is not None)
        self._targets: dict[int, Tensor] = {}  # fed targets whose frame's loss is still to come
        self._frame_base = 0  # global index of the current epoch's frame 0

    # -- construction helpers ------------------------------------------------------------------
    def _make_runtime(self, name: str, metas: list[TensorMeta], timeout: float) -> Runtime:
        """``local``: threads or CUDA streams in this process; ``processes``: one process per stage."""
        slots = self.schedule.message_slots()
        if name == "local":
            return LocalRuntime(self.stages, self.loss_fn, slots=slots, timeout=timeout)
        if name == "processes":
            check_whole_frames(self.schedule)
            return ProcessRuntime(self.stages, self.loss_fn, metas, slots=slots, timeout=timeout)
        raise ValueError(f"unknown runtime {name!r}; choose 'local' or 'processes'")

    def _make_graphs(self, cuda_graph: bool | None) -> StepGraphs | None:
        wanted = self.runtime.cuda if cuda_graph is None else cuda_graph
        if not wanted:
            return None
        if not isinstance(self.runtime, LocalRuntime) or not StepGraphs.supported(self.runtime):
            reason = "devices are not all CUDA" if not self.runtime.cuda else "stages span several CUDA devices"
            if cuda_graph:
                warnings.warn(f"cuda_graph disabled: {reason}; running eagerly on streams", stacklevel=3)
            return None
        for stage in self.stages:
            opt = stage.optimizer
            if opt is not None and any(g.get("capturable") is False for g in opt.param_groups):
                if cuda_graph:
                    warnings.warn(
                        f"cuda_graph disabled: {type(opt).__name__} is not capturable; pass capturable=True",
                        stacklevel=3,
                    )
                return None
        return StepGraphs(self.runtime)

    # -- running -------------------------------------------------------------------------------
    @property
    def depth(self) -> int:
        return len(self.stages)

    def step(self, x: Tensor, target: Tensor | None = None) -> StepResult:
        """Feed frame x (and its target); return what leaves the pipeline at this step.

        Both are copied before this returns: a caller may refill the same buffers for the next frame,
        while the target is read D-1 or more steps later (when its frame's loss is computed)."""
        if tuple(x.shape) != tuple(self.sample_input.shape):
            raise ValueError(
                f"frame shape {tuple(x.shape)} differs from sample_input shape {tuple(self.sample_input.shape)}"
            )
        frame = self._epoch.feed()
        self.runtime.feed("input", 0, frame, x)
        if target is not None and self.loss_fn is not None:
            self._targets[frame] = target.detach().clone()
        return self._run(last_frame=None)

    def flush(self) -> list[StepResult]:
        """Drain: run until every frame inside the pipeline has come out; then start afresh."""
        last = self._epoch.drain_frame()
        results = [self._run(last_frame=last) for _ in range(self.schedule.drain_steps())]
        self._new_epoch()
        return [r for r in results if r.frame is not None]

    def _run(self, last_frame: int | None) -> StepResult:
        start = time.perf_counter()
        step = self._epoch.next_step(last_frame)
        self._deliver_targets(step.plan)
        if self._graphs is not None:
            record = self._graphs.run_step(step.index, step.plan, step.key)
        else:
            record = self.runtime.run_step(step.index, step.plan)
        result = self._result(record, step.output_frame)
        if self.runtime.cuda:
            torch.cuda.synchronize(self.stages[-1].device)
            if any(s is None for s in result.stage_seconds):
                result.stage_seconds = self.runtime.device_seconds() if self._graphs is None else []
        result.step_seconds = time.perf_counter() - start
        return result

    def _result(self, record: StepRecord, frame: int) -> StepResult:
        output = record.outputs.get(frame)
        loss = record.losses.get(frame)
        if output is not None and self._graphs is not None:
            output = output.clone()  # graph outputs live in static memory the next replay reuses
        return StepResult(
            output=output,
            loss=None if loss is None else float(loss),
            frame=None if output is None and loss is None else self._frame_base + frame,
            stage_seconds=record.stage_seconds,
        )

    def _deliver_targets(self, plan: StepActions) -> None:
        """Send each target in the step that computes its frame's loss, not when it is fed: the loss
        comes D-1 or more steps later, longer than a static CUDA message slot (frame parity) lives."""
        for action in plan[-1]:
            frame = action.frame // action.chunks  # a micro-batch's loss reads its whole batch's target
            if action.op is Op.LOSS and frame in self._targets:
                target = self._targets.pop(frame)
                self.runtime.feed("target", self.depth - 1, frame, target)

    def _new_epoch(self) -> None:
        self._targets.clear()
        self._frame_base += self._epoch.fed
        self._epoch = Epoch(self.schedule, learn=self.loss_fn is not None)
        self.runtime.new_epoch()

    # -- weights -------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {
            "balance": list(self.balance),
            "schedule": self.schedule.name,
            "frames": self._frame_base + self._epoch.fed,
            "stages": self.runtime.state_dicts(),
        }

    def load_state_dict(self, state: dict) -> None:
        """Load weights and optimizer states; frames in flight are dropped (a fresh fill)."""
        if list(state["balance"]) != list(self.balance):
            raise ValueError(f"checkpoint balance {state['balance']} differs from this pipeline's {self.balance}")
        self.runtime.load_state_dicts(state["stages"])
        self._new_epoch()
        self._frame_base = int(state.get("frames", self._frame_base))
        if self._graphs is not None:
            self._graphs.clear()  # optimizer state tensors were replaced

    @property
    def gradient_delays(self) -> list[int]:
        """Per stage, how stale its gradients are (:meth:`Schedule.gradient_delay`), for lr rules."""
        return [self.schedule.gradient_delay(h) for h in range(self.depth)]

    def set_lr(self, lr: float | Sequence[float]) -> None:
        """Change the learning rate of every stage, or of each stage (one per stage). Graphs bake it
        in, so they are re-captured."""
        lrs = [float(lr)] * self.depth if isinstance(lr, int | float) else [float(v) for v in lr]
        if len(lrs) != self.depth:
            raise ValueError(f"{len(lrs)} learning rates for {self.depth} stages")
        self.runtime.set_lr(lrs)
        if self._graphs is not None:
            self._graphs.clear()

    def module(self) -> nn.Sequential:
        """The whole model with its current weights, on CPU."""
        return join(self.runtime.modules())

    # -- lifetime ------------------------------------------------------------------------------
    def close(self) -> None:
        self.runtime.close()

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
