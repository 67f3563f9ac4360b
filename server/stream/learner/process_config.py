"""What the learner process is started with: one picklable record, so a fork server or a Ray actor can hand it over."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..sizing import LearningSizes, Size
from .learner import LearnerConfig


@dataclass(frozen=True)
class LearnerProcessConfig:
    """What the learner process needs (picklable): built by ``stream.config.learner_process_config``."""

    learner: LearnerConfig
    display: Size  # the picture's size (the decoder's frames), as the source opened
    fps: float
    sizes: LearningSizes  # the learning sizes for a picture
    checkpoint_interval_s: float
    jpeg_quality: int
    cache_dir: Path | None

    @property
    def ladder(self) -> tuple[Size, ...]:
        """The learning sizes for the picture the source opened with, largest first (one where the size is fixed)."""
        return self.sizes.ladder(self.display)

    @property
    def auto(self) -> bool:
        return self.sizes.auto
