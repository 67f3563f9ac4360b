"""What an ended generation means for its stream (``judge``) and how long to wait before the next one
(``Backoff``): pure decisions, no processes, so they are tested on their own (``tests/test_stream_parts.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .. import errors

HEALTHY_RUN_S = 10.0  # a generation that ran this long (and learned) resets the back-off
FIRST_DELAY_S = 0.5
#: Another try fails the same way.
FINAL_LEARNER_CODES = frozenset({errors.CHECKPOINT_MISMATCH, errors.CHECKPOINT_UNREADABLE, errors.WORKER_FAILED})


@dataclass(frozen=True)
class Outcome:
    """Why a generation ended."""

    kind: Literal["closing", "decoder", "learner", "ended", "live_ended"]  # ended: a recording came to its end
    code: str | None = None
    message: str = ""


@dataclass(frozen=True)
class Verdict:
    """The stream's next state after a generation ended, and whether another generation starts."""

    retry: bool
    state: str  # ended | error | reconnecting
    code: str | None = None
    message: str = ""
    counts_as: Literal["learner_restart", "reconnect"] | None = None
    halve_lr: bool = False  # numeric blow-ups can crash native kernels too: restart gentler, like a NaN loss


def judge(outcome: Outcome, live: bool) -> Verdict:
    """Decide what an ended generation means for a stream (``live``: its source is live, not a file)."""
    if outcome.kind == "closing":
        return Verdict(False, "ended")
    if outcome.kind == "learner":
        if outcome.code in FINAL_LEARNER_CODES:
            return Verdict(False, "error", outcome.code, outcome.message)
        halve = outcome.code == errors.WORKER_CRASHED
        return Verdict(True, "reconnecting", outcome.code, outcome.message, "learner_restart", halve)
    if outcome.kind == "ended":
        return Verdict(False, "ended")
    retry = live and (outcome.kind == "live_ended" or outcome.code in errors.TRANSIENT)
    if not (retry or outcome.code == errors.DECODER_DIED):
        return Verdict(False, "error", outcome.code, outcome.message)
    code = outcome.code or errors.ENDED
    return Verdict(True, "reconnecting", code, outcome.message or "the live source ended", "reconnect")


class Backoff:
    """Exponential back-off between generations (0.5 s, 1 s, 2 s, ... up to ``max_s``); a healthy run starts over."""

    def __init__(self, max_s: float) -> None:
        self.max_s = max_s
        self.attempt = 0

    def next_delay(self, healthy: bool) -> float:
        self.attempt = 0 if healthy else self.attempt + 1
        return min(self.max_s, FIRST_DELAY_S * 2 ** max(0, self.attempt - 1))
