"""What a stream shows of itself: its state and phase, its frame budget in words and what it did on its own (each
also told to viewers as it changes), and what its processes last reported (rate, sizes, loss, learning rate,
checkpoints). The stream's supervisor thread writes it; the API reads it through the work's snapshot (``work.py``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .learner.versus_start import VersusStart
from .sizing import Size


def budget_notice(learning_size: Size, note: str) -> dict[str, Any]:
    """The viewers' ``budget`` message: the learning size and the frame budget in words."""
    return {"type": "budget", "learning_size": list(learning_size), "note": note}


def note_notice(note: str) -> dict[str, Any]:
    """The viewers' ``note`` message: one thing the stream did on its own (so no drift or recovery goes unsaid)."""
    return {"type": "note", "note": note}


class StreamStatus:
    def __init__(self, lr: float | None, fps: float | None, announce: Callable[[dict], None]) -> None:
        self._announce = announce  # hands a notice (state, budget, note) to the viewers
        self.state = "starting"  # starting | running | reconnecting | ended | error
        self.error: dict[str, str] | None = None
        self.phase: str | None = "opening the source"
        self.loss: float | None = None
        self.versus_start = VersusStart()  # the learner's loss beside its frozen start's, over the last window
        self.notes: list[str] = []  # what the stream did on its own that a user should know (went back to its best)
        self.lr = lr  # the learning rate in force
        self.fps = fps  # the rate in force: the source's, once it opened, unless one was asked for
        self.display: Size | None = None
        self.learning_size: Size | None = None
        self.budget_note: str | None = None
        self.resumed_from: int | None = None
        self.checkpoint_frames: int | None = None
        self.source_info: dict[str, Any] = {}
        self.position = 0.0  # seconds into a file source: where a restarted decoder resumes

    @property
    def active(self) -> bool:
        return self.state not in ("ended", "error")

    def notice(self) -> dict[str, Any]:
        """The viewers' ``state`` message."""
        return {"type": "state", "state": self.state, "error": self.error, "phase": self.phase}

    def set_state(self, state: str, code: str | None, message: str) -> None:
        """A new state; ``code`` (with ``message``) records an error, which a running stream clears with its phase
        (told once: running, not a phase-less "starting" first)."""
        self.state = state
        if code is not None:
            self.error = {"code": code, "message": message}
        elif state == "running":
            self.error, self.phase = None, None
        self._announce(self.notice())

    def set_phase(self, phase: str | None) -> None:
        if phase != self.phase:
            self.phase = phase
            self._announce(self.notice())

    def set_budget(self, learning_size: Size, note: str) -> None:
        """The budget controller's size and words; told to viewers when either changed."""
        changed = (learning_size, note) != (self.learning_size, self.budget_note)
        self.learning_size, self.budget_note = learning_size, note
        if changed:
            self._announce(budget_notice(learning_size, note))

    def add_note(self, note: str) -> None:
        """Told once: a source read again after a reconnect says what it said before."""
        if note not in self.notes:
            self.notes.append(note)
            self._announce(note_notice(note))
