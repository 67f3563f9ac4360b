"""Messages between the stages of one process: activations forward, gradients backward.

A message is addressed by ``(kind, stage, frame)``. On CPU a message is a private copy handed over
under a condition variable (stage threads block on it, with a timeout so nothing ever hangs). On
CUDA a message is copied on the receiving stage's copy stream into a *static* slot (one per frame
parity, as Algorithm 1's stable/temporary buffers), so the very same code can be captured in a
CUDA graph; a CUDA event orders a receive after a send of the same step.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import torch
from torch import Tensor

from .errors import PipelineError

Key = tuple[str, int, int]  # (kind, receiving stage, frame)


@dataclass
class Message:
    tensor: Tensor
    step: int  # the step it was sent in; a later step needs no event (steps are joined)
    event: torch.cuda.Event | None = None


class Streams:
    """The CUDA streams of one stage: compute, and a copy stream for what it receives."""

    def __init__(self, device: torch.device) -> None:
        self.compute = torch.cuda.Stream(device)
        self.copy = torch.cuda.Stream(device)

    def all(self) -> list[torch.cuda.Stream]:
        return [self.compute, self.copy]


class LocalTransport:
    """The ``Transport`` of the stages of one process (threads or CUDA streams)."""

    def __init__(
        self,
        devices: list[torch.device],
        streams: list[Streams] | None,
        slots: int,
        timeout: float,
    ) -> None:
        self.devices = devices
        self.streams = streams
        self.slots = slots
        self.timeout = timeout
        self.step = 0
        self._messages: dict[Key, Message] = {}
        self._buffers: dict[tuple[str, int, int], Tensor] = {}
        self._cond = threading.Condition()
        self._error: BaseException | None = None

    # -- sending -------------------------------------------------------------------------------
    def send(self, kind: str, stage: int, frame: int, tensor: Tensor) -> None:
        """Send ``tensor`` to ``stage`` from another stage, within a step."""
        self._put(kind, stage, frame, tensor, outside_step=False)

    def deliver(self, kind: str, stage: int, frame: int, tensor: Tensor) -> None:
        """Hand ``stage`` a tensor from the host between steps (pipeline inputs and targets):
        ordered by the current stream rather than an event."""
        self._put(kind, stage, frame, tensor, outside_step=True)

    def _put(self, kind: str, stage: int, frame: int, tensor: Tensor, outside_step: bool) -> None:
        device = self.devices[stage]
        if device.type == "cuda":
            message = self._send_cuda(kind, stage, frame, tensor, outside_step)
        else:
            message = Message(tensor.detach().to(device, copy=True), self.step)
        with self._cond:
            self._messages[(kind, stage, frame)] = message
            self._cond.notify_all()

    def _send_cuda(self, kind: str, stage: int, frame: int, tensor: Tensor, outside_step: bool) -> Message:
        slot_key = (kind, stage, frame % self.slots)
        buf = self._buffers.get(slot_key)
        if buf is None or buf.shape != tensor.shape or buf.dtype != tensor.dtype:
            buf = torch.empty(tensor.shape, dtype=tensor.dtype, device=self.devices[stage])
            self._buffers[slot_key] = buf
        if outside_step:
            with torch.no_grad():
                buf.copy_(tensor, non_blocking=True)
            return Message(buf, -1)
        assert self.streams is not None
        copy_stream = self.streams[stage].copy
        copy_stream.wait_stream(torch.cuda.current_stream(tensor.device))
        with torch.cuda.stream(copy_stream), torch.no_grad():
            buf.copy_(tensor, non_blocking=True)
            if tensor.device.type == "cuda":
                tensor.record_stream(copy_stream)
            event = torch.cuda.Event()
            event.record(copy_stream)
        return Message(buf, self.step, event)

    # -- receiving -----------------------------------------------------------------------------
    def ready(self, kind: str, stage: int, frame: int) -> bool:
        with self._cond:
            return (kind, stage, frame) in self._messages

    def recv(self, kind: str, stage: int, frame: int) -> Tensor:
        key = (kind, stage, frame)
        with self._cond:
            ok = self._cond.wait_for(lambda: key in self._messages or self._error is not None, self.timeout)
            if self._error is not None:
                raise PipelineError(f"stage {stage} stopped waiting for {kind} of frame {frame}") from self._error
            if not ok:
                raise PipelineError(
                    f"stage {stage} waited {self.timeout:.0f}s for {kind} of frame {frame}, which never came"
                )
            message = self._messages.pop(key)
        if message.event is not None and message.step == self.step:
            torch.cuda.current_stream(self.devices[stage]).wait_event(message.event)
        return message.tensor

    def take_marker(self, kind: str, stage: int, frame: int) -> None:
        """Bookkeeping of a receive done by a replayed CUDA graph."""
        with self._cond:
            self._messages.pop((kind, stage, frame), None)

    def put_marker(self, kind: str, stage: int, frame: int) -> None:
        """Bookkeeping of a send done by a replayed CUDA graph: the data is already in its slot."""
        buf = self._buffers[(kind, stage, frame % self.slots)]
        with self._cond:
            self._messages[(kind, stage, frame)] = Message(buf, self.step)

    # -- failure and reset ---------------------------------------------------------------------
    def abort(self, error: BaseException) -> None:
        """Wake every waiting stage: one stage failed, the step cannot complete."""
        with self._cond:
            self._error = error
            self._cond.notify_all()

    def clear(self) -> None:
        with self._cond:
            self._messages.clear()
            self._error = None
