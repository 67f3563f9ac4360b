"""Compiled twins take turns: torch.compile's FX tracing flag is process-wide, so two twins compiling at once can
fail each other (seen on a GPU when the budget controller's resizes started twins while the first still compiled)."""

from __future__ import annotations

import threading
import time
from itertools import pairwise

import pytest
import torch

from server.stream.learner import compiled_twin
from server.stream.learner.compiled_twin import CompiledTwin

pytestmark = pytest.mark.realtime


def test_twins_compile_one_at_a_time():
    spans: list[tuple[float, float]] = []

    def build():
        start = time.monotonic()
        time.sleep(0.2)
        spans.append((start, time.monotonic()))
        raise RuntimeError("stops here: only the build's timing matters")

    twins = [CompiledTwin(build, torch.zeros(1), torch.zeros(1)) for _ in range(3)]
    for twin in twins:
        twin._thread.join(10)
    assert len(spans) == 3 and all(t.error and "stops here" in t.error for t in twins)
    spans.sort()
    assert all(end <= next_start for (_, end), (next_start, _) in pairwise(spans)), spans


def test_a_twin_closed_before_its_turn_never_compiles():
    built = threading.Event()
    with compiled_twin._COMPILING:  # another twin compiles
        twin = CompiledTwin(built.set, torch.zeros(1), torch.zeros(1))
        twin.close()
    twin._thread.join(10)
    assert not built.is_set() and twin.error is None and twin.take() is None
