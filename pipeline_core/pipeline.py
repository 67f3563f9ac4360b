"""``Pipeline``: the public face of the engine. One call to :meth:`Pipeline.step` per frame."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping, Sequence

import torch
from torch import Tensor, nn

from .build import OptimizerFactory, build, choose_balance
from .contracts import Runtime, StepRecord
from .cuda_graph import GraphCaptureError, StepGraphs
from .epoch import Epoch
from .partition import TensorMeta, check_sequential, join, resolve_devices
from .processes import ProcessRuntime
from .runtime import LocalRuntime
from .schedules import Op, Schedule, StepActions
from .stage import GradAlign, LossFn
from .step_result import StepClock, StepResult
from .worker import check_whole_frames

log = logging.getLogger(__name__)


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
        start_method: str | None = None,
        start_early: bool = False,
        align_stale_grad: GradAlign | None = None,
        compile_backend: str | None = None,
        shown: int = 0,
    ) -> None:
        """``align_stale_grad``: how a stage brings a gradient of an earlier frame into line with the frame whose
        graph it is pushed through (PARTIME's stale gradients; see ``Stage.backward``); None: as it came.
        ``compile_backend``: ``torch.compile`` every stage with it (see ``Stage``; it compiles at the first step).
        ``shown``: the first ``shown`` samples of every input are only shown: forwarded without a graph, their output
        returned like the rest (the loss must not read them); the pipeline learns from the others.
        ``start_early`` (``runtime='processes'``): where the schedule allows it (``Schedule.later_stages_ahead``), the
        stages after the first begin the next step while the caller prepares its frame (``ProcessRuntime.run_step``);
        between two steps they may then hold one update more than the first (a state dict taken there shows it)."""
        model = check_sequential(model)
        resolved = resolve_devices(devices)
        self.balance = choose_balance(model, sample_input, stages, balance, resolved, loss_fn, shown)
        self.sample_input = sample_input.detach()
        self.loss_fn = loss_fn
        learn = loss_fn is not None
        parts = (model, sample_input, self.balance, resolved, optimizer, schedule, learn, align_stale_grad)
        built = build(*parts, compile_backend, shown)
        self.stages, self.schedule = built.stages, built.schedule
        self.runtime: Runtime = self._make_runtime(runtime, built.metas, timeout, start_method, start_early)
        self._graphs = self._make_graphs(cuda_graph)
        self._epoch = Epoch(self.schedule, learn=loss_fn is not None)
        self._targets: dict[int, Tensor] = {}  # fed targets whose frame's loss is still to come
        #: Counts fresh starts (a flush, a weight load, a failed graph capture): each drops the frames in flight,
        #: so a caller keeping per-frame state can tell that the frames it fed before will not come out.
        self.epochs = 0
        self._frame_base = 0  # global index of the current epoch's frame 0

    # -- construction helpers ------------------------------------------------------------------
    def _make_runtime(self, name: str, metas: list[TensorMeta], timeout: float, start_method: str | None,
                      start_early: bool) -> Runtime:  # fmt: skip
        """``local``: threads or CUDA streams in this process; ``processes``: one process per stage, started by
        ``start_method`` (multiprocessing's; default: a fork server, ``processes.START_METHOD``)."""
        slots = self.schedule.message_slots()
        if name == "local" and start_method is not None:
            raise ValueError(f"start_method={start_method!r} is for runtime='processes': the local runtime starts none")
        if name == "local" and start_early:
            raise ValueError("start_early is for runtime='processes': the local runtime's stages run in this process")
        if name == "local":
            return LocalRuntime(self.stages, self.loss_fn, slots=slots, timeout=timeout)
        if name == "processes":
            check_whole_frames(self.schedule)
            early = start_early and self.schedule.later_stages_ahead
            return ProcessRuntime(self.stages, self.loss_fn, metas, slots, timeout, start_method, early)
        raise ValueError(f"unknown runtime {name!r}; choose 'local' or 'processes'")

    def _make_graphs(self, cuda_graph: bool | None) -> StepGraphs | None:
        """Whole-step CUDA graphs: by default wherever every stage is on one CUDA device. Where they cannot be
        used the reason is said: a warning when they were asked for, a log line when they were the default."""
        wanted = self.runtime.cuda if cuda_graph is None else cuda_graph
        if not wanted:
            return None
        reason = self._why_not_capturable()
        if reason is None:
            assert isinstance(self.runtime, LocalRuntime)
            return StepGraphs(self.runtime)
        message = f"CUDA graphs off: {reason}; running eagerly on streams"
        if cuda_graph:
            warnings.warn(message, stacklevel=3)
        else:
            log.warning(message)
        return None

    def _why_not_capturable(self) -> str | None:
        if not self.runtime.cuda:
            return "devices are not all CUDA"
        if not isinstance(self.runtime, LocalRuntime) or not StepGraphs.supported(self.runtime):
            return "stages span several CUDA devices"
        for stage in self.stages:
            opt = stage.optimizer
            if opt is not None and any(g.get("capturable") is False for g in opt.param_groups):
                return f"{type(opt).__name__} is not capturable (pass capturable=True)"
        return None

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
        """One step. On CUDA nothing here waits for the device (``StepResult``)."""
        clock = StepClock(self.stages[-1].device)
        step = self._epoch.next_step(last_frame)
        self._deliver_targets(step.plan)
        following = None
        if self.runtime.starts_early and last_frame is None:  # a fed step: another, fed or draining, follows
            following = self.schedule.actions(step.index + 1, None, learn=self._epoch.learn)
            self._deliver_targets(following)
        record = self._run_plan(step.index, step.plan, step.key, following)
        clock.stop()
        return self._result(record, step.output_frame, clock)

    def _run_plan(self, index: int, plan: StepActions, key: int | None, following: StepActions | None) -> StepRecord:
        if following is not None:  # only a runtime that starts early is given one (no CUDA graphs)
            return self.runtime.run_step(index, plan, following)
        if self._graphs is None:
            return self.runtime.run_step(index, plan)
        try:
            return self._graphs.run_step(index, plan, key)
        except GraphCaptureError as exc:
            # The captured work never ran, but the step's bookkeeping did: the frames in flight are lost.
            log.warning("CUDA graphs off: a step could not be captured (%s); running eagerly from now on", exc)
            self._graphs = None
            self._new_epoch()
            return StepRecord()

    def _result(self, record: StepRecord, frame: int, clock: StepClock) -> StepResult:
        output = record.outputs.get(frame)
        loss = record.losses.get(frame)
        # A layer rewrites its readings in place at its next forward, and a replayed graph its outputs.
        readings = {name: t.detach().clone() for name, t in record.readings.items()}
        if self._graphs is not None:
            output = None if output is None else output.clone()
            loss = None if loss is None else loss.clone()
        return StepResult(
            output=output,
            loss_tensor=loss,
            frame=None if output is None and loss is None else self._frame_base + frame,
            clock=clock,
            stage_seconds=record.stage_seconds,
            stage_events=record.stage_events,
            readings=readings,
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
        self.epochs += 1
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
        in, so they are re-captured. Stages started early (``start_early``) began the next step already: they take
        the rate from the step after it (after a weight load, at once: a load starts afresh)."""
        lrs = [float(lr)] * self.depth if isinstance(lr, int | float) else [float(v) for v in lr]
        if len(lrs) != self.depth:
            raise ValueError(f"{len(lrs)} learning rates for {self.depth} stages")
        self.runtime.set_lr(lrs)
        if self._graphs is not None:
            self._graphs.clear()

    def set_group_options(self, holding: str, options: Mapping[str, float]) -> None:
        """Every stage's optimizer groups that hold the option ``holding`` take ``options``
        (``Stage.set_group_options``: an ``lr_scale`` moves their rate). Graphs bake the rates in, so they are
        re-captured."""
        self.runtime.set_group_options(holding, dict(options))
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
