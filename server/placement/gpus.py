"""Where a new stream learns: the GPU that holds the fewest streams, every stage of the stream on it.

Why one GPU per stream: a whole-step CUDA graph needs every stage on one device (``pipeline_core.cuda_graph``), and
a small net's stages gain little from a second GPU, while a stream spread over every GPU makes every stream share
every GPU. Streams then fill the GPUs evenly.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

import torch

from pipeline_core.partition import resolve_devices

Devices = tuple[str, ...]


def available_gpus() -> list[str]:
    """This machine's CUDA devices, ``cuda:N`` (none without a GPU)."""
    return [str(d) for d in resolve_devices(None) if d.type == "cuda"]


def place(requested: Devices | None, placed: Iterable[Devices | None], gpus: Sequence[str]) -> Devices | None:
    """A new stream's devices: those it asked for; else, where there are ``gpus``, the one that the streams already
    ``placed`` use least (the lowest index on a tie); else None (the CPU)."""
    if requested or not gpus:
        return requested
    load = Counter(_named(device) for devices in placed if devices for device in devices)
    return (min(gpus, key=lambda gpu: (load[gpu], torch.device(gpu).index)),)


def _named(device: str) -> str:
    """``cuda`` is ``cuda:0``, as torch takes it."""
    d = torch.device(device)
    return f"cuda:{d.index or 0}" if d.type == "cuda" else str(d)
