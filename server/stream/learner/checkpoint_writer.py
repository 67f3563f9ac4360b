"""Checkpoints written beside the frame loop, so that a write never holds up a frame.

A checkpoint is taken in the frame loop (``Learner.take_checkpoint``: one round trip to the stages, between two steps,
so it is one step's state) and written by one thread of its own, in the order taken: ``torch.save``, then ``fsync`` of
the file and of its folder (``checkpoints.save_atomic``), or a PUT to an object store. Each is answered
(``CheckpointWritten``, with the request's id where the API asked for it) once it is stored or has failed, so an answer
still means the file is there. Why: written in the loop, a checkpoint held a CPU stream's frame (128x96, two stage
processes) for 24-37 ms, now 6-11 (its state gathered and checked); the write alone took 8-9 ms on a local disk, and an
fsync on a busy one or a PUT to an object store takes far longer. Every 30 s that lump fell on one frame of a stream
near its budget; in a recorded run the one frame the ring dropped came with it
(docs/notebook/2026-12-01-a-checkpoint-beside-the-frames.md).

A non-finite loss's recovery reads the last checkpoint stored: one being written is either not yet there (the one
before is read) or whole (``os.replace`` is atomic), never half of one.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Any

from ...errors import in_words
from ..checkpoints import Checkpoint
from ..protocol import CheckpointWritten
from .learner import Learner

log = logging.getLogger(__name__)


class CheckpointWriter:
    """Takes a learner's checkpoints where it is called and writes them on its own thread, answering each on ``out``."""

    def __init__(self, learner: Learner, out: Any) -> None:
        self.learner, self.out = learner, out
        self._taken: queue.Queue[tuple[Checkpoint, int | None] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._write_all, name="checkpoint-writer", daemon=True)
        self._thread.start()

    def checkpoint(self, request: int | None = None) -> None:
        """Take a checkpoint now and queue its write; weights already non-finite are answered at once (-1, no error),
        as is a stage that could not be read."""
        try:
            taken = self.learner.take_checkpoint()
        except (OSError, RuntimeError) as exc:
            log.warning("cannot take the checkpoint: %s", exc)
            self.out.put(CheckpointWritten(-1, request, f"cannot take the checkpoint: {in_words(exc)}"))
            return
        if taken is None:
            self.out.put(CheckpointWritten(-1, request, None))
            return
        self._taken.put((taken, request))

    def close(self) -> None:
        """Write what was taken, then end the thread: the last checkpoint is stored before the process exits."""
        self._taken.put(None)
        self._thread.join()

    def _write_all(self) -> None:
        while (job := self._taken.get()) is not None:
            checkpoint, request = job
            self.out.put(_write(checkpoint, request))


def _write(checkpoint: Checkpoint, request: int | None) -> CheckpointWritten:
    """Store and say so. A failed write (disk full, read-only folder) is reported with its reason and never fatal:
    the weights live on in memory, the old checkpoint is intact (atomic save), and the next checkpoint tries again."""
    try:
        checkpoint.write()
    except Exception as exc:  # any failure: a writer thread that died would leave every later checkpoint unanswered
        expected = isinstance(exc, (OSError, RuntimeError))  # torch.save reports a short write as a RuntimeError
        log.warning("cannot write the checkpoint: %s", exc, exc_info=not expected)
        return CheckpointWritten(-1, request, f"cannot write the checkpoint: {_write_failure(exc)}")
    return CheckpointWritten(checkpoint.frames, request, None)


def _write_failure(exc: BaseException) -> str:
    """Why a write failed, in words. torch.save wraps a failed write in a RuntimeError whose text is all it keeps of
    the cause."""
    if isinstance(exc, OSError):
        return in_words(exc)
    text = str(exc).lower()
    return "no space left on the disk" if "no space" in text or "write failed" in text else in_words(exc)
