"""A learner's pipeline built again with compiled stages, in a background thread, while the stream learns eagerly.

Why in the background: ``torch.compile`` takes seconds (from its on-disk cache) to a minute (cold) for a flow net's
forward and backward, and a stream must show its first picture within seconds. The twin compiles on a sample input
(its own weights are thrown away: the learner loads its current state into it when it takes it over), with CUDA
graphs off, so that nothing it does can disturb a capture in the learner's thread.

One twin compiles at a time in a process: Dynamo's FX tracing flag is global, so a twin entering a compiled function
while another traces fails ("using FX to symbolically trace a dynamo-optimized function"; seen on an H200 when the
budget controller's resizes started twins while the first still compiled). A twin closed before its turn never
compiles.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import torch

from pipeline_core import Pipeline

log = logging.getLogger(__name__)
#: Compiled variants kept per compiled function: every stage of every size the budget visits is one (torch keeps 8).
RECOMPILE_LIMIT = 64
#: Held by the twin that compiles (see the module's docstring).
_COMPILING = threading.Lock()


class CompiledTwin:
    """``build()`` (a pipeline with compiled stages) called and warmed up on a step's ``sample`` input and its
    ``target`` in a thread of its own."""

    def __init__(self, build: Callable[[], Pipeline], sample: torch.Tensor, target: torch.Tensor) -> None:
        import torch._dynamo.config

        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)
        self._build, self._sample, self._target = build, sample, target
        self._pipe: Pipeline | None = None
        self.error: str | None = None
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._make, name="compile", daemon=True)
        self._thread.start()

    def _make(self) -> None:
        with _COMPILING:
            if not self._closed.is_set():
                self._compile()

    def _compile(self) -> None:
        try:
            pipe = self._build()
            for _ in range(2 * pipe.depth + 2):  # every stage forwards and backpropagates (each compiles once)
                r = pipe.step(self._sample, target=self._target)
            r.loss  # noqa: B018 - waits for the device: the compiled kernels have run
            pipe.flush()
            self._pipe = pipe
        except Exception as exc:  # a net the compiler cannot take stays eager; the stream never notices
            self.error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            log.warning("compiling the learner's stages failed (%s): it goes on learning eagerly", self.error)

    @property
    def ready(self) -> bool:
        return not self._thread.is_alive() and self._pipe is not None

    def take(self) -> Pipeline | None:
        """The warmed-up compiled pipeline, once, when it is ready; None before (and after a failure)."""
        if not self.ready:
            return None
        pipe, self._pipe = self._pipe, None
        return pipe

    def close(self) -> None:
        """Release what the twin built; a compile still running finishes in its daemon thread and is dropped, one not
        yet started never starts."""
        self._closed.set()
        pipe = self.take()
        if pipe is not None:
            pipe.close()
