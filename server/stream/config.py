"""A stream's settings, defined once: ``StreamConfig`` (a request merged with the server's defaults), and the one
place that derives each process's configuration from it (``decoder_config``, ``learner_process_config``) and what the
API shows of it (``shown_settings``)."""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass, fields
from typing import Any

from pipeline_core.partition import resolve_devices

from ..settings import Settings
from .checkpoints import Location, checkpoint_path
from .learner.learner import LearnerConfig
from .learner.process_config import LearnerProcessConfig
from .sizing import LearningSizes, Size
from .source.decoder import DecoderConfig
from .source.sources import SourceSpec

# Settings whose value in force may differ from the one asked for: the API shows the stream's own (its snapshot).
IN_FORCE = frozenset({"fps", "width", "height", "lr", "devices"})


@dataclass
class StreamConfig:
    """A stream's resolved parameters (request fields merged with the server's defaults)."""

    name: str
    source: str  # as the service shows it (``sources.shown_source``: no password)
    spec: SourceSpec  # what the decoder opens
    fps: float | None  # asked for; None: the source's own rate (capped)
    width: int | None  # learning size asked for (one side may follow the picture's aspect ratio)
    height: int | None
    auto: bool  # the learning size follows the frame budget (at most width x height when given)
    model: str
    init: str
    stages: int
    lr: float | None
    schedule: str
    devices: tuple[str, ...] | None
    loop: bool


def shown_settings(cfg: StreamConfig, shown: Container[str]) -> dict[str, Any]:
    """The settings among ``shown`` (a response model's field names) that the API reports as they were resolved."""
    return {f.name: getattr(cfg, f.name) for f in fields(cfg) if f.name in shown and f.name not in IN_FORCE}


def checkpoint_file(cfg: StreamConfig, settings: Settings) -> Location:
    """Where the stream's weights are saved: one checkpoint per stream name."""
    return checkpoint_path(settings.checkpoint_dir, cfg.name)


def decoder_config(cfg: StreamConfig, settings: Settings, start_at_s: float = 0.0) -> DecoderConfig:
    """The decoder's settings; ``start_at_s``: where a restarted file source resumes."""
    s = settings
    return DecoderConfig(
        source=cfg.spec,
        fps=cfg.fps,
        max_fps=s.max_fps,
        display_side=s.display_side,
        loop=cfg.loop,
        open_timeout_s=s.open_timeout_s,
        read_timeout_s=s.read_timeout_s,
        start_at_s=start_at_s,
    )


def on_gpu(devices: tuple[str, ...] | None) -> bool:
    """Whether a stream with these devices (None: the default) learns on a GPU."""
    return any(d.type == "cuda" for d in resolve_devices(list(devices) if devices else None))


def learner_process_config(
    cfg: StreamConfig, settings: Settings, display: Size, fps: float, lr: float | None
) -> LearnerProcessConfig:
    """The learner process's settings once the picture's size and the rate are known (the decoder's
    ``SourceOpened``); ``lr`` is the rate in force (halved after a crash)."""
    s = settings
    gpu = on_gpu(cfg.devices)
    learner = LearnerConfig(
        name=cfg.name,
        model=cfg.model,
        init=cfg.init,
        stages=cfg.stages,
        lr=lr,
        schedule=cfg.schedule,
        devices=cfg.devices,
        checkpoint_path=checkpoint_file(cfg, s),
        compile_backend="inductor" if gpu and s.gpu_compile else None,
    )
    return LearnerProcessConfig(
        learner=learner,
        display=display,
        fps=fps,
        sizes=LearningSizes(s.learning_side, gpu, cfg.width, cfg.height, cfg.auto),
        checkpoint_interval_s=s.checkpoint_interval_s,
        jpeg_quality=s.jpeg_quality,
        cache_dir=s.cache_dir,
    )
