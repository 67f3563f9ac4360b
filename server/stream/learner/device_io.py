"""What crosses between the host and a learner's device, in one place: frames going in, results coming out.

Why one place: on a GPU every read of a device tensor on the host waits for the device, and every copy from
ordinary (pageable) host memory waits for the device to finish what it was doing before the copy. Scattered through
a frame's work, such waits leave the GPU idle between the pieces of a step. Here frames go up as uint8 (a quarter of
float32's bytes) through a pinned buffer without blocking, and become floats on the device; what leaves the learner
for a frame comes down in one batch of copies into pinned buffers, followed by one event, which is the only thing
the host waits for, once the whole step has been queued; the learner may queue the next step before it waits
(``frame_loop.FrameLoop``), so the host's work on one frame runs beside the device's on the next. On CPU both are plain
tensor views and copies.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor


class FrameUpload:
    """uint8 RGB frames [H, W, 3] onto ``device`` as (3, H, W) floats in [0, 1], converted there."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._staging: Tensor | None = None  # pinned: a copy from it does not block the host
        self._copied: torch.cuda.Event | None = None  # when the last copy out of the staging buffer has run

    def __call__(self, frame: np.ndarray) -> Tensor:
        source = torch.from_numpy(np.ascontiguousarray(frame))
        if self.device.type != "cuda":
            return source.permute(2, 0, 1).float().div_(255.0)
        if self._staging is None or self._staging.shape != source.shape:
            self._staging = torch.empty(source.shape, dtype=torch.uint8, pin_memory=True)
        elif self._copied is not None:
            self._copied.synchronize()  # the previous frame's copy has left the buffer (it has, a frame ago)
        self._staging.copy_(source)
        on_device = self._staging.to(self.device, non_blocking=True)
        self._copied = torch.cuda.Event()
        self._copied.record(torch.cuda.current_stream(self.device))
        return on_device.permute(2, 0, 1).float().div_(255.0)


class HostCopy:
    """Named device tensors brought to the host as numpy arrays of their own: every copy queued at once (``start``),
    one wait when they are read (``PendingCopy.result``). Up to ``in_flight`` copies may wait to be read while the
    next is queued: each has pinned buffers of its own."""

    def __init__(self, in_flight: int = 1) -> None:
        self._slots: list[dict[str, Tensor]] = [{} for _ in range(in_flight + 1)]
        self._turn = 0

    def start(self, **tensors: Tensor) -> PendingCopy:
        pinned = self._slots[self._turn]
        self._turn = (self._turn + 1) % len(self._slots)
        copies: dict[str, Tensor] = {}
        events: list[torch.cuda.Event] = []
        for name, tensor in tensors.items():
            tensor = tensor.detach()
            if tensor.device.type != "cuda":
                copies[name] = tensor.clone()  # the learner may change it in place before it is read
                continue
            buffer = pinned.get(name)
            if buffer is None or buffer.shape != tensor.shape or buffer.dtype != tensor.dtype:
                buffer = pinned[name] = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
            buffer.copy_(tensor, non_blocking=True)
            copies[name] = buffer
            events.append(torch.cuda.Event())
            events[-1].record(torch.cuda.current_stream(tensor.device))
        return PendingCopy(copies, events)

    def fetch(self, **tensors: Tensor) -> dict[str, np.ndarray]:
        return self.start(**tensors).result()


class PendingCopy:
    """Copies on their way to the host; ``result`` waits for them."""

    def __init__(self, copies: dict[str, Tensor], events: list[torch.cuda.Event]) -> None:
        self._copies, self._events = copies, events

    def result(self) -> dict[str, np.ndarray]:
        for event in self._events:
            event.synchronize()
        # Arrays of their own: the pinned buffers are refilled for a later frame, the tensors belong to the learner.
        return {name: np.array(copy.numpy()) for name, copy in self._copies.items()}
