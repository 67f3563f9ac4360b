"""Layers whose cost is known: they sleep in forward. Sleeping releases the GIL and uses no core, so what a runtime
does with them shows its scheduling (which stages wait for which), not how busy the machine is."""

from __future__ import annotations

import time

import torch
from torch import nn


class Sleep(nn.Module):
    """Sleeps ``seconds`` in forward, and has a weight to update."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds
        self.scale = nn.Parameter(torch.ones(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(self.seconds)
        return x * self.scale
