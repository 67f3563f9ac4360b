"""Splitting a batch into micro-batches and putting per-micro-batch results back together."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from .schedules.base import micro_id


def scatter(batch: Tensor, frame: int, chunks: int) -> dict[int, Tensor]:
    """Equal micro-batches along the first dimension, keyed by their micro-batch ids. Equal sizes
    make the mean of micro-batch means the batch mean, so gradients match the unsplit batch."""
    if batch.dim() == 0 or batch.shape[0] % chunks:
        raise ValueError(f"a batch of shape {tuple(batch.shape)} does not split into {chunks} equal micro-batches")
    return {micro_id(frame, m, chunks): piece for m, piece in enumerate(batch.chunk(chunks))}


class Gather:
    """Per-batch results arriving one micro-batch at a time, possibly over several steps."""

    def __init__(self, combine: Callable[[list[Tensor]], Tensor]) -> None:
        self.combine = combine
        self.pieces: dict[int, dict[int, Tensor]] = {}

    def add(self, micro: int, chunks: int, value: Tensor) -> tuple[int, Tensor] | None:
        """Record micro-batch ``micro``; return (batch frame, combined result) once all are in."""
        frame, m = divmod(micro, chunks)
        pieces = self.pieces.setdefault(frame, {})
        pieces[m] = value
        if len(pieces) < chunks:
            return None
        del self.pieces[frame]
        return frame, self.combine([pieces[i] for i in range(chunks)])

    def clear(self) -> None:
        self.pieces.clear()


def concat(pieces: list[Tensor]) -> Tensor:
    return torch.cat(pieces)


def total(pieces: list[Tensor]) -> Tensor:
    return torch.stack(pieces).sum()
