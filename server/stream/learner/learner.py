"""A stream's learner: the pipeline at its learning size, its learning rate, its checkpoints, the zero-flow
baseline of each frame, and its frozen start, which now and then scores the same frame (what learning bought).

How it learns is ``models.online.learning_for(init)``: from the shipped weights, each step's input is the real pair
(shown) and a pair made from it with a known flow (learned from); from scratch, the real pair's photometric loss.

The flow nets are fully convolutional, so the learned weights (and Adam's moments, one per weight) fit any learning
size: ``resize`` rebuilds the pipeline at another size from the current state, keeping the split between stages.
A checkpoint therefore resumes at whatever size the budget controller picks; only the model, the stage count and the
initialisation must match.
"""

from __future__ import annotations

import copy
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_map_only

from models.flow_nets import build_flow_net
from models.online import Learning, learning_for, online_pipeline
from pipeline_core import Pipeline, StepResult
from pipeline_core.partition import resolve_devices

from .. import checkpoints
from ..sizing import Size
from .compiled_twin import CompiledTwin
from .profile_cache import JsonCache, key
from .start_score import Judging, StartScore

#: Checkpoints made before ``init`` was recorded were all learned from scratch.
LEGACY_INIT = "scratch"
#: Checkpoints made before ``learning`` was recorded all learned from the photometric loss.
LEGACY_LEARNING = "photometric"


@dataclass(frozen=True)
class LearnerConfig:
    name: str
    model: str
    init: str  # "pretrained" | "scratch" (``models.flow_nets.INITS``)
    stages: int
    lr: float | None  # every stage's; None: the checkpoint's, else ``learning_for(init).lr``
    schedule: str
    devices: tuple[str, ...] | None
    checkpoint_path: checkpoints.Location
    #: ``torch.compile`` the stages with this backend, in the background (``compiled_twin``); None: eager only.
    compile_backend: str | None = None


#: How a stage process starts (``stage_runtime``): forked from the learner process. The learner is itself a fork
#: server's child, and there multiprocessing would start a fork server of its own, a new interpreter importing torch:
#: seconds of a small machine at every start of a generation.
STAGE_START_METHOD = "fork"


def stage_runtime(cfg: LearnerConfig, compile_backend: str | None) -> dict[str, Any]:
    """Where the pipeline's stages run: on CPU, more than one stage, each in a process of its own; else in the
    learner process (threads, or CUDA streams). Why: a step of the flow net is some ten thousand small ops, each
    dispatched by Python under the GIL, so stage threads of one process mostly take turns; as processes they compute
    at once (at 128x96, 47.7 ms a step against 55.1 ms as threads, ways processes-D2 and eager-D2 of
    ``bench/results/learning-step-cpu-128x96-processes.md``). As processes the stages after the first start the next
    step while this process makes its pair (``Pipeline``'s ``start_early``): the last stage otherwise waits out the
    host's work of every frame idle (docs/notebook/2026-11-30-where-a-cpu-frame-waits.md). A compiled pipeline stays
    in the process that compiles it (``compiled_twin``)."""
    cpu = all(d.type == "cpu" for d in resolve_devices(list(cfg.devices) if cfg.devices else None))
    if cpu and cfg.stages > 1 and compile_backend is None:
        return {"runtime": "processes", "start_method": STAGE_START_METHOD, "start_early": True}
    return {"runtime": "local", "start_method": None}


class CheckpointMismatch(Exception):
    pass


def with_fitting_moments(saved: dict, fresh: dict) -> dict:
    """``saved`` (a pipeline's state dict) without the optimizer state of any stage whose parameter groups differ
    from ``fresh``'s: that stage resumes its weights with fresh moments. Why: an older release grouped the parameters
    otherwise (before the still gate's priors were anchored, their stage had two groups, not three); the weights are
    what the stream learned, the moments only its last few hundred steps."""

    def groups(optimizer: dict | None) -> list[int] | None:
        return None if optimizer is None else [len(g["params"]) for g in optimizer["param_groups"]]

    stages = [
        s if groups(s["optimizer"]) == groups(f["optimizer"]) else s | {"optimizer": None}
        for s, f in zip(saved["stages"], fresh["stages"], strict=True)
    ]
    return saved | {"stages": stages}


def sample(size: Size) -> torch.Tensor:
    """A real pair's shape at ``size``."""
    return torch.zeros(1, 6, size[1], size[0])


class Learner:
    """The pipeline, its learning rate and its checkpoints. ``splits`` caches the measured split between stages per
    (model, size, stages, device): profiling the layers is the slowest part of a start."""

    def __init__(self, cfg: LearnerConfig, size: Size, splits: JsonCache | None = None) -> None:
        self.cfg = cfg
        saved = checkpoints.load(cfg.checkpoint_path)
        if saved is not None:
            self._check_compatible(saved)
        seed = zlib.crc32(cfg.name.encode())
        torch.manual_seed(seed)  # a new stream's initial weights depend on its name only
        self.learning: Learning = learning_for(cfg.init)
        self.feed = self.learning.feed(seed, cfg.stages)
        # The lr of every stage (``online_pipeline``). An explicit one wins (a restart after a crash passes a halved
        # one); else the checkpoint's; else the default.
        self.lr = cfg.lr or (float(saved["lr"]) if saved else self.learning.lr)
        devices = list(cfg.devices) if cfg.devices else None
        split_key = key(cfg.model, size, cfg.stages, resolve_devices(devices)[0])
        # A resumed stream keeps its checkpoint's split (the weights and optimizer states are stored per stage); a
        # new one takes the cached split, unless it was measured for another version of the net (another layer
        # count), or measures one.
        net = build_flow_net(cfg.model, init=cfg.init)
        # The stream's frozen start, the weights it began with (a resumed stream's too: they depend on the name and
        # the init only): it scores a frame's learned pair now and then (``start_score``), through the layers that
        # pair passes (``Learning.learned_part``), and whole it runs the feed's judgments (``Feed.judgment``).
        self.start_net = self.learning.frozen_start(net)
        self.start = self.learning.learned_part(self.start_net)
        cached = splits.get(split_key) if splits is not None and not saved else None
        layers = saved["pipeline"]["balance"] if saved else (cached if cached and sum(cached) == len(net) else None)
        if saved and sum(layers) != len(net):
            raise CheckpointMismatch(
                f"checkpoint {checkpoints.file_name(cfg.checkpoint_path)} was made with another version of the "
                f"{cfg.model} net ({sum(layers)} layers; this one has {len(net)}); use another name"
            )
        self.pipe = self._pipeline(net, size, layers)
        if splits is not None and not saved and layers is None and cfg.stages > 1:
            splits.put(split_key, self.pipe.balance)
        self.size = size
        self.resumed_from = 0
        if saved:
            self.pipe.load_state_dict(with_fitting_moments(saved["pipeline"], self.pipe.state_dict()))
            self.resumed_from = int(saved["pipeline"]["frames"])
        self._apply_lr()  # after the load: optimizer states carry lrs
        self._initial = None if saved else copy.deepcopy(self.pipe.state_dict())
        self.start_net.to(self.device)  # its learned part, ``start``, with it
        self._fed: tuple[torch.Tensor, torch.Tensor] | None = None  # the last step's input and target
        self._best = copy.deepcopy(self.pipe.state_dict())  # the best weights so far (``keep_best``)
        self.nonfinite = 0
        self.poison_next = False  # fault-injection hook: the next frame is all NaN, so its loss is NaN
        self.compiled = False  # the pipeline's stages are compiled
        self._twin: CompiledTwin | None = None
        self._compile_in_background()

    def _pipeline(self, module: nn.Sequential, size: Size, layers: list[int] | None,
                  compile_backend: str | None = None) -> Pipeline:  # fmt: skip
        cfg = self.cfg
        return online_pipeline(
            module,
            sample(size),
            cfg.stages,
            self.lr,
            learning=self.learning,
            layers=layers,
            devices=list(cfg.devices) if cfg.devices else None,
            schedule=cfg.schedule,
            compile_backend=compile_backend,
            **stage_runtime(cfg, compile_backend),
        )

    def _compile_in_background(self) -> None:
        """Start compiling a twin of the pipeline at the current size (``compiled_twin``), when so configured."""
        if self._twin is not None:
            self._twin.close()
            self._twin = None
        backend = self.cfg.compile_backend
        if backend is None:
            return
        module, layers, size = self.pipe.module(), self.pipe.balance, self.size
        # A step's input and target as the stream's feed makes them (a known-motion step's is a batch of two), from a
        # feed of its own: the stream's goes on untouched.
        step_input, target = self.learning.feed()(sample(size).to(self.device))
        self._twin = CompiledTwin(lambda: self._pipeline(module, size, layers, backend), step_input, target)

    @property
    def compiled_ready(self) -> bool:
        """A compiled pipeline waits to take over (``adopt_compiled``)."""
        return self._twin is not None and self._twin.ready

    @property
    def compile_error(self) -> str | None:
        """Why the compiled pipeline could not be built (the stream goes on eagerly); None while it compiles or once
        it is ready."""
        return None if self._twin is None else self._twin.error

    def adopt_compiled(self) -> None:
        """Go on with the compiled pipeline: the same weights, optimizer states and split; frames in flight go (flush
        them first)."""
        assert self._twin is not None
        pipe = self._twin.take()
        self._twin = None
        assert pipe is not None
        pipe.load_state_dict(self.pipe.state_dict())
        self.pipe.close()
        self.pipe = pipe
        self._apply_lr()
        self.compiled = True

    def _check_compatible(self, saved: dict) -> None:
        mine = {"model": self.cfg.model, "stages": self.cfg.stages, "init": self.cfg.init,
                "learning": learning_for(self.cfg.init).name}  # fmt: skip
        theirs = {"model": saved.get("model"), "stages": saved.get("stages"), "init": saved.get("init", LEGACY_INIT),
                  "learning": saved.get("learning", LEGACY_LEARNING)}  # fmt: skip
        if mine != theirs:
            raise CheckpointMismatch(
                f"checkpoint {checkpoints.file_name(self.cfg.checkpoint_path)} was made with {theirs}, this stream "
                f"asks for {mine}; use another name or the same settings"
            )

    def resize(self, size: Size) -> None:
        """Learn at ``size`` from now on, with the same weights, optimizer states and split; frames in flight go."""
        state, module = self.pipe.state_dict(), self.pipe.module()
        self.pipe.close()
        self.pipe = self._pipeline(module, size, state["balance"])  # eager until compiled at this size too
        self.pipe.load_state_dict(state)
        self._apply_lr()
        self.size = size
        self.compiled = False
        self._compile_in_background()

    def close(self) -> None:
        if self._twin is not None:
            self._twin.close()
        self.pipe.close()

    def take_checkpoint(self) -> checkpoints.Checkpoint | None:
        """What a checkpoint holds now (one round trip to the stages), on the CPU; None where the weights are already
        non-finite, which are never saved. Its weights are checked as it holds them: gathering the stages' modules
        once more to check cost a CPU service 15 ms of a frame (exploratory, 128x96, two stage processes). On the CPU
        because a checkpoint is read there anyway (``checkpoints.load``), and its writer's thread
        (``checkpoint_writer``) then never touches a GPU."""
        state = self.pipe.state_dict()
        weights = (t for stage in state["stages"] for t in stage["module"].values() if t.is_floating_point())
        if not all(torch.isfinite(t).all() for t in weights):
            return None
        state = tree_map_only(torch.Tensor, torch.Tensor.cpu, state)
        cfg = self.cfg
        return checkpoints.Checkpoint(
            {"pipeline": state, "model": cfg.model, "init": cfg.init, "learning": self.learning.name,
             "stages": cfg.stages, "width": self.size[0], "height": self.size[1], "lr": self.lr,
             "saved_at": time.time()},
            cfg.checkpoint_path,
            int(state["frames"]),
        )  # fmt: skip

    def save(self) -> int:
        """Checkpoint now (unless the weights are already non-finite); return the frame count saved, -1 if none."""
        checkpoint = self.take_checkpoint()
        if checkpoint is None:
            return -1
        checkpoint.write()
        return checkpoint.frames

    @property
    def device(self) -> torch.device:
        """Where frame pairs go in (the first stage's device)."""
        return self.pipe.stages[0].device

    def step(self, x: torch.Tensor, contiguous: bool = True) -> tuple[torch.Tensor, StepResult | None]:
        """One real frame pair (on ``device``) in: the loss zero flow has on what the step learns from (0-d, on the
        device: the baseline a learned flow must beat), and what left the pipeline, None while it fills
        (``models.feeds.shown`` of its output is a pair's flow as the stream shows it: ``Feed.show``). Nothing is
        read on the host here: the caller checks the loss once it has it (``recover`` after a non-finite one).
        ``contiguous``: the pair's frames follow one another in the source (``Feed``)."""
        if self.poison_next:
            x, self.poison_next = torch.full_like(x, float("nan")), False
        step_input, target = self._fed = self.feed(x, contiguous)
        with torch.no_grad():
            zero = self.learning.zero_flow_loss(step_input, target)
        r = self.pipe.step(step_input, target=target)
        if r.output is not None:
            self.feed.observe(r.output, r.readings)
            r.output = self.feed.show(r.output)
        self.feed.tune(self.pipe)
        return zero, (r if r.frame is not None else None)

    def flush(self) -> Iterator[StepResult]:
        """The frames inside the pipeline, each output as the stream shows it (``step``)."""
        for r in self.pipe.flush():
            if r.output is not None:
                r.output = self.feed.show(r.output)
            yield r

    def start_score(self, judge: bool = False) -> StartScore:
        """The frozen start's scoring of what the last step learned from, to run a few layers at a time
        (``StartScore.advance``); its loss, beside the learner's own on the same pair, is what learning bought. Where
        it may ``judge``, the feed's newest judgment (``Feed.judgment``) runs first, through the whole start, in the
        same turns."""
        assert self._fed is not None, "the start scores the last step's input: step first"
        step_input, target = self._fed
        judgment = self.feed.judgment() if judge else None
        judging = None if judgment is None else Judging(self.start_net, judgment, self.feed.judged)
        return StartScore(self.start, step_input[-1:], target, self.learning.loss_fn, judging)

    def keep_best(self) -> None:
        """Keep the current weights (and optimizer states) as the best so far (``go_back_to_best``)."""
        self._best = copy.deepcopy(self.pipe.state_dict())

    def go_back_to_best(self) -> None:
        """Learn on from the best weights kept (the ones this run began with, before any were kept); the frame count
        goes on, the frames in flight go."""
        state = {**self._best, "frames": self.pipe.state_dict()["frames"]}
        self.pipe.load_state_dict(copy.deepcopy(state))
        self._apply_lr()

    def recover(self) -> None:
        """After a non-finite loss: back to the last good weights, half the step size."""
        saved = checkpoints.load(self.cfg.checkpoint_path)
        state = saved["pipeline"] if saved else self._initial
        self.pipe.load_state_dict(state)
        self.resumed_from = int(state["frames"])
        self.lr /= 2
        self._apply_lr()
        self.nonfinite += 1

    def _apply_lr(self) -> None:
        """Every stage at ``lr`` (a loaded optimizer state brings the rate it was saved with), and the options the
        stream asks of its optimizers set again at the next step (``models.feeds.Feed.tune``)."""
        self.pipe.set_lr(self.lr)
        self.feed.retune()
