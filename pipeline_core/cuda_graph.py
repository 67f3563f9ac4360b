"""Whole-step CUDA graphs: capture a steady step once, then replay it for one launch per step.

After the fill steps every step of a schedule does the same work on the same static buffers up to
frame parity (``Schedule.steady_key``), so one graph per key replays it. A key's first steady step
runs eagerly (it allocates gradients, optimizer state and message slots); its second is captured
and then replayed; later ones only replay. Messages live in static slots (``transport.py``), so a
replay only has to redo the host-side bookkeeping of which messages exist.

All stages must share one CUDA device: PyTorch's allocator routes allocations of a capture to the
graph's private pool only on the capturing device, so a multi-device step runs eagerly on streams.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .contracts import StepRecord
from .runtime import LocalRuntime
from .schedules import SENDS, Op, StepActions


class GraphCaptureError(RuntimeError):
    """A step's work could not be captured (an op that reads the device from the host, or one CUDA graphs forbid)."""


_RECEIVES = {Op.INPUT: "input", Op.LOSS: "target", Op.RECV_ACT: "act", Op.RECV_GRAD: "grad"}


class StepGraphs:
    def __init__(self, runtime: LocalRuntime) -> None:
        self.runtime = runtime
        self.device = runtime.stages[0].device
        self._graphs: dict[int, tuple[torch.cuda.CUDAGraph, list[Tensor], list[Tensor]]] = {}
        self._warm: set[int] = set()
        self._pool = None
        self._stream = torch.cuda.Stream(self.device)

    @staticmethod
    def supported(runtime: LocalRuntime) -> bool:
        return runtime.cuda and len({s.device for s in runtime.stages}) == 1

    def run_step(self, step: int, plan: StepActions, key: int | None) -> StepRecord:
        if key is None or key not in self._warm:
            if key is not None:
                self._warm.add(key)
            return self.runtime.run_step(step, plan)
        if key not in self._graphs:
            self._capture(step, plan, key)  # does the host bookkeeping of this step
        else:
            self._bookkeep(step, plan)
        return self._replay(plan, key)

    def _capture(self, step: int, plan: StepActions, key: int) -> None:
        """Record the step's work; host bookkeeping happens now, the GPU work at the replay."""
        graph = torch.cuda.CUDAGraph()
        self._stream.wait_stream(torch.cuda.current_stream(self.device))
        try:
            # thread_local: another thread of the process may allocate meanwhile (a stage compiling in the background).
            with torch.cuda.graph(graph, pool=self._pool, stream=self._stream, capture_error_mode="thread_local"):
                record = self.runtime.run_step(step, plan)
        except Exception as exc:
            raise GraphCaptureError(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from exc
        self._pool = graph.pool()
        self._graphs[key] = (graph, list(record.outputs.values()), list(record.losses.values()), record.readings)

    def _replay(self, plan: StepActions, key: int) -> StepRecord:
        graph, outputs, losses, readings = self._graphs[key]
        graph.replay()
        out_frames = [a.frame for acts in plan for a in acts if a.op is Op.OUTPUT]
        loss_frames = [a.frame for acts in plan for a in acts if a.op is Op.LOSS]
        return StepRecord(
            outputs=dict(zip(out_frames, outputs, strict=True)),
            losses=dict(zip(loss_frames, losses, strict=True)),
            stage_seconds=[None] * len(plan),
            readings=dict(readings),
        )

    def _bookkeep(self, step: int, plan: StepActions) -> None:
        """Mirror, on the host, the messages the replayed graph sends and receives.

        Sends first: a receive may consume a message sent within the same step (sequential)."""
        transport = self.runtime.transport
        transport.step = step
        for h, actions in enumerate(plan):
            for a in actions:
                if a.op in SENDS:
                    kind, offset = SENDS[a.op]
                    transport.put_marker(kind, h + offset, a.frame)
        for h, actions in enumerate(plan):
            for a in actions:
                if a.op in _RECEIVES:
                    kind = _RECEIVES[a.op]
                    transport.take_marker(kind, h, a.grad_frame if a.op is Op.RECV_GRAD else a.frame)

    def clear(self) -> None:
        """Forget captured graphs (weights reloaded, learning rate changed)."""
        self._graphs.clear()
        self._warm.clear()
