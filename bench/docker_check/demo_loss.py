"""How good a set of the demo net's weights is on the demo clip, measured here, on the same pairs at one size.

Why here and not over the WebSocket: the service moves the demo's learning size while it settles its frame budget,
and a loss, even relative to zero flow's, is not comparable across sizes (the same weights score far worse relative
to zero flow at 64x64 than at 128x128: ``tests/test_docker_check.py``). Whether
learning in the container wrecked the shipped weights is therefore judged by running both sets of weights on the
same frame pairs of the same clip, generated as ``server.stream.source.demo`` generates it.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import torch

from models.flow_loss import online_loss
from models.flow_nets import build_flow_net
from models.online import frame_pair
from models.streams import generate
from server.stream.source.demo import DEMO_FRAMES, DEMO_SIZE


@cache
def demo_pairs(size: int = DEMO_SIZE, frames: int = DEMO_FRAMES) -> tuple[torch.Tensor, ...]:
    """The demo clip's consecutive frame pairs (``server.stream.source.demo`` makes its video from the same stream,
    seed 0)."""
    clip = generate(size=size, frames=frames, seed=0).frames
    return tuple(frame_pair(clip[t], clip[t + 1]) for t in range(len(clip) - 1))


def relative_loss(net_name: str, weights: dict[str, torch.Tensor], pairs: tuple[torch.Tensor, ...]) -> float:
    """Median over ``pairs`` of the net's online loss divided by zero flow's on the same pair."""
    net = build_flow_net(net_name, init="scratch")
    net.load_state_dict(weights)
    net.eval()
    ratios = []
    with torch.no_grad():
        for x in pairs:
            zero = online_loss(x.new_zeros(1, 2, *x.shape[2:]), x)
            ratios.append(float(online_loss(net(x), x) / zero))
    return float(np.median(ratios))
