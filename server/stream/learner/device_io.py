"""What crosses between the host and a learner's device, in one place: frames going in, results coming out.

Why one place: on a GPU every read of a device tensor on the host waits for the device, and every copy from
ordinary (pageable) host memory waits for the device to finish what it was doing before the copy. Scattered through
a frame's work, such waits leave the GPU idle between the pieces of a step. Here frames go up as uint8 (a quarter of
float32's bytes) through a pinned buffer without blocking, and become floats on the device; what leaves the learner
for a frame comes down in one batch of copies into pinned buffers, followed by one event, which is the only thing
the host waits for, once the whole step has been queued. On CPU both are plain tensor views and copies.
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
    """Named device tensors brought to the host as numpy arrays of their own: every copy queued, then one wait."""

    def __init__(self) -> None:
        self._pinned: dict[str, Tensor] = {}

    def fetch(self, **tensors: Tensor) -> dict[str, np.ndarray]:
        copies: dict[str, Tensor] = {}
        events: list[torch.cuda.Event] = []
        for name, tensor in tensors.items():
            tensor = tensor.detach()
            if tensor.device.type != "cuda":
                copies[name] = tensor
                continue
            buffer = self._pinned.get(name)
            if buffer is None or buffer.shape != tensor.shape or buffer.dtype != tensor.dtype:
                buffer = self._pinned[name] = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
            buffer.copy_(tensor, non_blocking=True)
            copies[name] = buffer
            events.append(torch.cuda.Event())
            events[-1].record(torch.cuda.current_stream(tensor.device))
        for event in events:
            event.synchronize()
        # Arrays of their own: the pinned buffers are refilled for the next frame, the tensors belong to the learner.
        return {name: np.array(copy.numpy()) for name, copy in copies.items()}
