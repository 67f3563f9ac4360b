"""The engine's own errors, in one module every other one can import without cycles."""

from __future__ import annotations


class PipelineError(RuntimeError):
    """A stage failed or a message never came: raised instead of hanging."""


class ScheduleError(ValueError):
    """A schedule that cannot run (a receive nobody sends, a sample never learned): refused before
    any frame goes in, rather than found as a hang or a silent leak mid-stream."""
