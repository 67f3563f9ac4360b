"""The benchmark networks of PARTIME Section V, as ``nn.Sequential`` so the engine can split them.

* :func:`pixelwise` — Table I: a deep stack of same-resolution convolutions (no pooling).
* :func:`classifier` — Table II top: convolutions interleaved with pooling, F outputs.
* :func:`resnet` — Table II bottom: residual blocks whose skip connections may span stages; the
  skip travels *inside the tensor* (extra channels carried by identity), so any layer boundary
  is a valid stage boundary and nothing but a tensor crosses it.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def _conv(cin: int, cout: int, kernel: int) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, kernel, padding=kernel // 2)


def pixelwise(
    layers: int = 150, channels: int = 32, outputs: int = 1, kernel: int = 5, inputs: int = 3
) -> nn.Sequential:
    """``layers`` conv layers at input resolution: conv+ReLU blocks, then a conv to ``outputs``."""
    if layers < 2:
        raise ValueError(f"pixelwise needs at least 2 layers, got {layers}")
    blocks: list[nn.Module] = [nn.Sequential(_conv(inputs, channels, kernel), nn.ReLU())]
    blocks += [nn.Sequential(_conv(channels, channels, kernel), nn.ReLU()) for _ in range(layers - 2)]
    blocks.append(_conv(channels, outputs, kernel))
    return nn.Sequential(*blocks)


def classifier(
    layers: int = 150, channels: int = 32, outputs: int = 10, kernel: int = 3, pools: int = 5, inputs: int = 3
) -> nn.Sequential:
    """Conv blocks with ``pools`` evenly spaced 2x2 max-poolings, then global pooling and a linear head."""
    if layers < pools + 1:
        raise ValueError(f"classifier needs more layers ({layers}) than poolings ({pools})")
    every = max(1, layers // (pools + 1))
    blocks: list[nn.Module] = []
    cin, pooled = inputs, 0
    for i in range(layers):
        block: list[nn.Module] = [_conv(cin, channels, kernel), nn.ReLU()]
        if (i + 1) % every == 0 and pooled < pools:
            block.append(nn.MaxPool2d(2))
            pooled += 1
        blocks.append(nn.Sequential(*block))
        cin = channels
    blocks.append(nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, outputs)))
    return nn.Sequential(*blocks)


class Fork(nn.Module):
    """Start a skip: carry a copy of the input as extra channels."""

    def forward(self, x: Tensor) -> Tensor:
        return torch.cat([x, x], dim=1)


class OnMain(nn.Module):
    """Apply ``layer`` to the main channels; pass the carried skip channels through untouched."""

    def __init__(self, layer: nn.Module, channels: int) -> None:
        super().__init__()
        self.layer = layer
        self.channels = channels

    def forward(self, x: Tensor) -> Tensor:
        main, skip = x[:, : self.channels], x[:, self.channels :]
        return torch.cat([self.layer(main), skip], dim=1)


class Merge(nn.Module):
    """End a skip: add the carried copy back to the main channels."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.channels = channels

    def forward(self, x: Tensor) -> Tensor:
        return torch.relu(x[:, : self.channels] + x[:, self.channels :])


def resnet(blocks: int = 16, channels: int = 32, outputs: int = 10, inputs: int = 3) -> nn.Sequential:
    """A ResNet-style stack: stem, ``blocks`` two-conv residual blocks (4 layers each), head."""
    layers: list[nn.Module] = [nn.Sequential(_conv(inputs, channels, 3), nn.BatchNorm2d(channels), nn.ReLU())]
    for _ in range(blocks):
        layers += [
            Fork(),
            OnMain(nn.Sequential(_conv(channels, channels, 3), nn.BatchNorm2d(channels), nn.ReLU()), channels),
            OnMain(nn.Sequential(_conv(channels, channels, 3), nn.BatchNorm2d(channels)), channels),
            Merge(channels),
        ]
    layers.append(nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, outputs)))
    return nn.Sequential(*layers)
