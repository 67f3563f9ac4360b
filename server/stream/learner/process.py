"""The learner process: owns one stream's learner and learns optical flow on every frame.

It builds the learner at the learning size the budget starts from (the size remembered for this source, if any),
then hands each frame the ring gives it to the ``FrameLoop`` (``frame_loop.py``: the pair, the step, what is
published, the budget) and serves the stream's requests between frames. It checkpoints atomically every N seconds,
on request and on stop, each written beside the frames that follow (``checkpoint_writer.py``).

Threads: one intra-op thread here (each pipeline stage one of its own): on the shared 2-core machine under load two
per op made the layer profiling at start 37 s, not 1.9 s (OpenMP spins); ``bench.learning_step`` compares steady steps.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import queue
import signal
import time
from pathlib import Path
from typing import Any

import cv2
import torch

from models import cpu_loops
from pipeline_core.partition import resolve_devices
from pipeline_core.worker import settle_process

from ... import errors
from ...errors import in_words
from ..checkpoints import CheckpointUnreadable
from ..protocol import (
    CheckpointRequest,
    FramesDropped,
    InjectFault,
    LearnedToTheEnd,
    LearnerFailed,
    LearnerReady,
    Phase,
)
from ..ring import FrameRing, RingSpec
from .budget import BudgetController
from .checkpoint_writer import CheckpointWriter
from .frame_loop import FrameLoop
from .learner import CheckpointMismatch, Learner
from .process_config import LearnerProcessConfig
from .profile_cache import JsonCache, key

log = logging.getLogger(__name__)
POLL_S = 0.2


def run_learner_process(cfg: LearnerProcessConfig, ring_spec: RingSpec, slots: Any, out: Any, control: Any) -> None:
    """Process entry point; publishes ``protocol`` messages on ``out``, serves ``control`` requests."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the stream's work stops us through the ring's stop flag
    # What the fork server preloaded (torch) is never garbage: frozen, the two full collections while the learner is
    # built no longer rescan it, which cut them from about 0.4 s to 0.13 s of the stream's start (one run, exploratory).
    settle_process()
    # A daemonic process may not start processes; the pipeline's stages may be processes of this one
    # (``learner.stage_runtime``). They end with it: at its exit (they are daemons), or, were it killed, when they
    # find their parent gone (``pipeline_core.stage_process``).
    mp.current_process().daemon = False
    torch.set_num_threads(1)  # see the module's docstring
    cv2.setNumThreads(1)
    if cfg.cache_dir is not None:  # compiled kernels outlive the process: a restart or another stream reuses them
        os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(Path(cfg.cache_dir).resolve() / "inductor"))
    parent = os.getppid()
    try:
        ring = FrameRing.attach(ring_spec)
    except FileNotFoundError:
        return  # the stream was stopped before this process got going
    lc = cfg.learner
    out.put(Phase(f"building the learner ({lc.model} net, {lc.init} weights, {lc.stages} stages)"))
    device = resolve_devices(list(lc.devices) if lc.devices else None)[0]
    if device.type == "cpu":
        cpu_loops.warm()  # before the stage processes fork: they inherit the loops compiled
    sizes = JsonCache(cfg.cache_dir / "learning_sizes.json" if cfg.cache_dir else None)
    size_key = key(lc.model, lc.stages, device, cfg.display, f"{cfg.fps:g}fps")
    cached = sizes.get(size_key) if cfg.auto else None
    start = cfg.ladder.index(tuple(cached)) if cached and tuple(cached) in cfg.ladder else 0
    controller = BudgetController(cfg.ladder, start, cfg.fps, cfg.auto)
    try:
        learner = Learner(lc, controller.size, JsonCache(cfg.cache_dir / "splits.json" if cfg.cache_dir else None))
    except CheckpointMismatch as exc:
        out.put(LearnerFailed(errors.CHECKPOINT_MISMATCH, str(exc)))
        return
    except CheckpointUnreadable as exc:
        out.put(LearnerFailed(errors.CHECKPOINT_UNREADABLE, str(exc)))
        return
    except Exception as exc:
        log.exception("the learner's set-up failed")
        message = f"could not build the learner: {in_words(exc)}"
        out.put(LearnerFailed(errors.WORKER_FAILED, message))
        return
    loop = FrameLoop(cfg, learner, controller, ring, out, lambda size: sizes.put(size_key, list(size)))
    ready = LearnerReady(learner.resumed_from, learner.lr, learner.pipe.balance, learner.size, controller.note())
    out.put(ready)
    ring.set_ready()
    writer = CheckpointWriter(learner, out)
    try:
        _learn(cfg, loop, writer, ring, slots, control, parent)
    finally:
        writer.checkpoint()
        writer.close()
        learner.close()
        ring.close()


def _learn(cfg: LearnerProcessConfig, loop: FrameLoop, writer: CheckpointWriter, ring: FrameRing, slots: Any,
           control: Any, parent: int) -> None:  # fmt: skip
    last_save, finished = time.monotonic(), False
    while not ring.stopping and os.getppid() == parent:
        _serve_control(loop.learner, control, writer)
        if time.monotonic() - last_save >= cfg.checkpoint_interval_s:
            writer.checkpoint()
            last_save = time.monotonic()
        got = ring.read(slots, POLL_S)
        if got is None:
            if ring.drained and not finished:
                loop.finish()
                loop.out.put(LearnedToTheEnd())
                finished = True
            continue
        if got is False:
            loop.out.put(FramesDropped("worker_behind", 1))
            continue
        loop.on_frame(*got)


def _serve_control(learner: Learner, control: Any, writer: CheckpointWriter) -> None:
    while True:
        try:
            request = control.get_nowait()
        except queue.Empty:
            return
        match request:
            case CheckpointRequest(id=rid):
                writer.checkpoint(rid)
            case InjectFault(fault="nan_loss"):
                learner.poison_next = True
