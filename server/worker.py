"""The worker process: owns one stream's ``pipeline_core.Pipeline`` and learns optical flow on every frame.

Per frame it forms the pair (previous, current), calls ``Pipeline.step`` once, and publishes what leaves the
pipeline (PARTIME: the output of step t belongs to frame t-(D-1)): the flow as JPEGs (``overlay.py``), the loss,
ΔP for the whole step and per stage, and the frame's capture time. It checkpoints atomically every N seconds, on
request and on stop; a non-finite loss restores the last checkpoint and halves the learning rate.
"""

from __future__ import annotations

import copy
import logging
import math
import os
import queue
import signal
import time
import zlib
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from models.flow_nets import build_flow_net
from models.online import BASE_LR, frame_pair, online_pipeline, stage_lrs
from pipeline_core import StepResult

from . import checkpoints, errors
from .overlay import frame_images
from .ring import FrameRing, RingSpec

log = logging.getLogger(__name__)
POLL_S = 0.2


@dataclass(frozen=True)
class WorkerConfig:
    name: str
    model: str
    stages: int
    width: int
    height: int
    lr: float | None
    schedule: str
    devices: tuple[str, ...] | None
    checkpoint_path: Path
    checkpoint_interval_s: float
    jpeg_quality: int


class CheckpointMismatch(Exception):
    pass


class Learner:
    """The pipeline, its learning rate and its checkpoints."""

    def __init__(self, cfg: WorkerConfig) -> None:
        self.cfg = cfg
        saved = checkpoints.load(cfg.checkpoint_path)
        if saved is not None:
            self._check_compatible(saved)
        sample = torch.zeros(1, 6, cfg.height, cfg.width)
        torch.manual_seed(zlib.crc32(cfg.name.encode()))  # a new stream's initial weights depend on its name only
        # The base lr (the last stage's; earlier stages scale it down by their gradient delay, ``stage_lrs``). An
        # explicit one wins (a restart after a crash passes a halved one); else the checkpoint's; else the default.
        self.lr = cfg.lr or (float(saved["lr"]) if saved else BASE_LR)
        # A resumed stream keeps its checkpoint's split (profiling could pick another one and the weights would
        # not fit); a new one is balanced by measured layer costs.
        self.pipe = online_pipeline(
            build_flow_net(cfg.model, init="scratch"),
            sample,
            cfg.stages,
            self.lr,
            layers=saved["pipeline"]["balance"] if saved else None,
            devices=list(cfg.devices) if cfg.devices else None,
            schedule=cfg.schedule,
        )
        self.resumed_from = 0
        if saved:
            self.pipe.load_state_dict(saved["pipeline"])
            self.resumed_from = int(saved["pipeline"]["frames"])
        self._apply_lr()  # after the load: optimizer states carry lrs
        self._initial = None if saved else copy.deepcopy(self.pipe.state_dict())
        self.nonfinite = 0
        self.poison_next = False  # fault-injection hook: the next frame is all NaN, so its loss is NaN

    def _check_compatible(self, saved: dict) -> None:
        mine = {"model": self.cfg.model, "stages": self.cfg.stages, "width": self.cfg.width, "height": self.cfg.height}
        theirs = {key: saved.get(key) for key in mine}
        if mine != theirs:
            raise CheckpointMismatch(
                f"checkpoint {self.cfg.checkpoint_path.name} was made with {theirs}, this stream asks for {mine}; "
                "use another name or the same settings"
            )

    def save(self) -> int:
        """Checkpoint now (unless the weights are already non-finite); return the frame count saved."""
        state = self.pipe.state_dict()
        if not all(torch.isfinite(p).all() for p in self.pipe.module().parameters()):
            return -1
        cfg = self.cfg
        checkpoints.save_atomic(
            {"pipeline": state, "model": cfg.model, "stages": cfg.stages, "width": cfg.width, "height": cfg.height,
             "lr": self.lr, "saved_at": time.time()},
            cfg.checkpoint_path,
        )  # fmt: skip
        return int(state["frames"])

    def step(self, x: torch.Tensor) -> StepResult | None:
        """One frame pair in; what left the pipeline out — None while filling and after a non-finite loss."""
        if self.poison_next:
            x, self.poison_next = torch.full_like(x, float("nan")), False
        r = self.pipe.step(x, target=x)
        if r.loss is not None and not math.isfinite(r.loss):
            self.recover()
            return None
        return r if r.frame is not None else None

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
        """Every stage's rate from the base ``lr``, scaled down by the stage's gradient delay."""
        self.pipe.set_lr(stage_lrs(self.lr, self.pipe.gradient_delays))


def run_worker(cfg: WorkerConfig, ring_spec: RingSpec, slots: Any, out: Any, control: Any) -> None:
    """Process entry point; publishes dict messages on ``out`` (see ``session.py`` for their use)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the API process stops us through the ring's stop flag
    parent = os.getppid()
    try:
        ring = FrameRing.attach(ring_spec)
    except FileNotFoundError:
        return  # the stream was stopped before this process got going
    try:
        learner = Learner(cfg)
    except CheckpointMismatch as exc:
        out.put({"type": "error", "code": errors.CHECKPOINT_MISMATCH, "message": str(exc)})
        return
    except Exception as exc:
        log.exception("worker set-up failed")
        out.put({"type": "error", "code": errors.WORKER_FAILED, "message": f"{type(exc).__name__}: {exc}"})
        return
    out.put({"type": "ready", "resumed_from": learner.resumed_from, "lr": learner.lr, "balance": learner.pipe.balance})
    ring.set_ready()
    try:
        _learn(cfg, learner, ring, slots, out, control, parent)
    finally:
        _checkpoint(learner, out)
        learner.pipe.close()
        ring.close()


def _learn(cfg: WorkerConfig, learner: Learner, ring: FrameRing, slots: Any, out: Any, control: Any,
           parent: int) -> None:  # fmt: skip
    previous: np.ndarray | None = None
    pending: deque[tuple[np.ndarray, float]] = deque()  # frames inside the pipeline, oldest first
    last_save = time.monotonic()
    while not ring.stopping and os.getppid() == parent:
        _serve_control(learner, control, out)
        if time.monotonic() - last_save >= cfg.checkpoint_interval_s:
            _checkpoint(learner, out)
            last_save = time.monotonic()
        got = ring.read(slots, POLL_S)
        if got is None:
            continue
        if got is False:
            out.put({"type": "dropped", "reason": "worker_behind"})
            continue
        frame, capture_time = got
        if previous is None:
            previous = frame
            continue
        x = frame_pair(previous, frame)
        previous = frame
        pending.append((frame, capture_time))
        nonfinite = learner.nonfinite
        r = learner.step(x)
        if learner.nonfinite != nonfinite:
            pending.clear()  # the pipeline restarted empty
            out.put({"type": "nonfinite", "lr": learner.lr, "count": learner.nonfinite,
                     "restored_from": learner.resumed_from})  # fmt: skip
        if r is None:
            continue
        shown, shown_capture = pending.popleft()
        flow = r.output[0].detach().permute(1, 2, 0).numpy()
        out.put({
            "type": "frame", "frame": r.frame, "loss": r.loss, "dp_s": r.step_seconds,
            "stage_dp_s": list(r.stage_seconds), "capture_time": shown_capture,
            "images": frame_images(shown, flow, cfg.jpeg_quality),
        })  # fmt: skip


def _serve_control(learner: Learner, control: Any, out: Any) -> None:
    while True:
        try:
            request = control.get_nowait()
        except queue.Empty:
            return
        if request.get("type") == "checkpoint":
            _checkpoint(learner, out, request.get("id"))
        elif request.get("type") == "fault" and request.get("fault") == "nan_loss":
            learner.poison_next = True


def _checkpoint(learner: Learner, out: Any, request: int | None = None) -> None:
    """Save and report. A failed write (disk full, read-only dir) is reported with its reason and never fatal: the
    weights live on in memory, the old checkpoint is intact (atomic save), and the next checkpoint tries again."""
    try:
        frames, error = learner.save(), None
    except (OSError, RuntimeError) as exc:  # torch.save reports a short write (disk full) as a RuntimeError
        frames, error = -1, f"cannot write the checkpoint: {getattr(exc, 'strerror', None) or exc}"
        log.warning("%s", error)
    out.put({"type": "checkpoint", "frames": frames, "request": request, "error": error})
