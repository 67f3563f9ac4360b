"""Messages between stages that live in different processes (or machines): torch.distributed p2p.

Stage h is rank h. gloo sends are rendezvous: a send completes only once the receiver has posted
the matching receive, so a blocking send-then-receive on two ranks deadlocks. Hence:

* every receive is posted *early*, before the stage computes anything in a step: at the start of
  each step a stage posts an ``irecv`` for every message its neighbours will send it during that
  step (``interpreter.messages_to`` reads them off the schedule's plan), whether it consumes the
  message in this step (sequential) or the next one (PARTIME);
* receives land in pre-allocated buffers, ``slots`` per kind, chosen by frame parity (double
  buffering: the message of frame f+1 arrives while frame f is being used);
* a sent tensor is held until its send completes, and every send of a step completes before the
  step ends (at most one send in flight per buffer).

Plain ``isend``/``irecv`` pairs, one message per tag and direction, never ``batch_isend_irecv``
(which can hang on gloo, pytorch#132644). Every wait has a timeout; a timed-out gloo pair is closed,
so a timeout is fatal for the pipeline and is raised as a ``PipelineError`` naming the stage.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import Tensor

from .errors import PipelineError
from .partition import TensorMeta

#: One tag per kind of message, so that each (sender, receiver, kind) is its own FIFO.
TAGS = {"act": 1, "grad": 2, "target": 3, "control": 4}


@dataclass
class _Incoming:
    tensor: Tensor
    work: dist.Work | None  # None: delivered by this process (``put``)
    source: int


class DistTransport:
    """The ``Transport`` of one stage (this process): sends to and receives from other ranks."""

    def __init__(self, group: dist.ProcessGroup, stage: int, timeout: float) -> None:
        self.group = group
        self.stage = stage
        self.timeout = timeout
        self._wait_for = timedelta(seconds=timeout)
        self._incoming: dict[tuple[str, int], _Incoming] = {}
        self._buffers: dict[tuple[str, int], Tensor] = {}
        self._slots: dict[str, int] = {}
        self._sending: list[tuple[dist.Work, Tensor, str]] = []
        self.receiving_s = 0.0  # time spent waiting for messages to arrive, in all (a stage's busy time leaves it out)

    # -- receiving -----------------------------------------------------------------------------
    def post(self, kind: str, frame: int, source: int, meta: TensorMeta, slots: int = 2) -> None:
        """Post the receive of ``kind``/``frame`` from rank ``source`` into a reusable buffer."""
        slot = (kind, frame % slots)
        for (k, f), pending in self._incoming.items():
            if k == kind and f % slots == slot[1] and pending.work is not None:
                raise PipelineError(
                    f"stage {self.stage}: {kind} of frame {f} is still unread when frame {frame} arrives "
                    f"(only {slots} receive buffers per kind)"
                )
        shape, dtype = meta
        buf = self._buffers.get(slot)
        if buf is None or tuple(buf.shape) != tuple(shape) or buf.dtype != dtype:
            buf = self._buffers[slot] = torch.empty(shape, dtype=dtype)
        work = self.group.recv([buf], source, TAGS[kind])
        self._incoming[(kind, frame)] = _Incoming(buf, work, source)

    def put(self, kind: str, frame: int, tensor: Tensor) -> None:
        """Deliver a message that came from this process's own driver (frames, targets)."""
        self._incoming[(kind, frame)] = _Incoming(tensor, None, self.stage)

    def ready(self, kind: str, stage: int, frame: int) -> bool:
        """Whether the message was put or is on its way (its receive is posted)."""
        return (kind, frame) in self._incoming

    def recv(self, kind: str, stage: int, frame: int) -> Tensor:
        assert stage == self.stage, f"stage {self.stage} cannot receive for stage {stage}"
        incoming = self._incoming.pop((kind, frame), None)
        if incoming is None:
            raise PipelineError(f"stage {stage} needs {kind} of frame {frame}, but no one sends it")
        if incoming.work is not None:
            began = time.perf_counter()
            self._wait(incoming.work, f"receiving {kind} of frame {frame} from stage {incoming.source}")
            self.receiving_s += time.perf_counter() - began
        return incoming.tensor

    # -- sending -------------------------------------------------------------------------------
    def send(self, kind: str, stage: int, frame: int, tensor: Tensor) -> None:
        tensor = tensor.detach().contiguous()
        work = self.group.send([tensor], stage, TAGS[kind])
        self._sending.append((work, tensor, f"sending {kind} of frame {frame} to stage {stage}"))

    def finish_sends(self) -> None:
        """Wait until every message sent so far has been delivered; the tensors may then change."""
        sending, self._sending = self._sending, []
        for work, _tensor, what in sending:
            self._wait(work, what)

    # -- epochs --------------------------------------------------------------------------------
    def drain(self) -> None:
        """Receive (and drop) the messages that were sent but not used: the end of an epoch."""
        self.finish_sends()
        incoming, self._incoming = self._incoming, {}
        for (kind, frame), pending in incoming.items():
            if pending.work is not None:
                self._wait(pending.work, f"draining {kind} of frame {frame} from stage {pending.source}")

    def _wait(self, work: dist.Work, what: str) -> None:
        try:
            work.wait(self._wait_for)
        except RuntimeError as exc:
            raise PipelineError(f"stage {self.stage} failed {what} (timeout {self.timeout:.0f}s): {exc}") from exc
