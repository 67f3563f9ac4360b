"""Flow networks as ``nn.Sequential`` so the PARTIME engine can cut them at any layer boundary.

Input (B, 6, H, W): previous and current RGB in [0, 1]; output (B, 2, H, W): flow (u, v) in pixels
from the previous frame to the current one. Every layer passes ONE tensor to the next, so a stage
boundary can fall anywhere; what a later layer needs travels inside that tensor as channels.

Design (why): a net that only stacks 3x3 convs sees ~17 px and learns online slowly and unstably.
These nets (1) encode both frames with shared (siamese) convs down to 1/4 resolution, (2) build a
parameter-free local cost volume there (±``disp`` cells = ±4·disp px), (3) read it with a
soft-argmax into an initial flow, so matching works from the first frames, and (4) refine with
dilated convs (receptive field > 100 px) that add a residual to that flow; (5) upsample to full
resolution. Learning then shapes the features and the refinement, frame after frame.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class SiameseConv(nn.Module):
    """The same conv applied to both halves of the channels (previous | current)."""

    def __init__(self, cin: int, cout: int, stride: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, stride=stride, padding=1)
        self.act = nn.LeakyReLU(0.1)

    def forward(self, x: Tensor) -> Tensor:
        b, c, h, w = x.shape
        y = self.act(self.conv(x.reshape(b * 2, c // 2, h, w)))
        return y.reshape(b, -1, *y.shape[-2:])


class CostVolume(nn.Module):
    """Features (B, 2C, h, w) -> [soft-argmax flow (2), cost (K²), previous features (C)], K = 2·disp+1.

    Correlations of L2-normalised features; the soft-argmax temperature is learned. Flow channels
    are in cells of this resolution.
    """

    def __init__(self, disp: int) -> None:
        super().__init__()
        self.disp = disp
        self.log_temperature = nn.Parameter(torch.tensor(2.5))
        k = 2 * disp + 1
        dy, dx = torch.meshgrid(torch.arange(k) - disp, torch.arange(k) - disp, indexing="ij")
        self.register_buffer("offsets", torch.stack([dx.flatten(), dy.flatten()]).float(), persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        b, c2, h, w = x.shape
        f1, f2 = F.normalize(x[:, : c2 // 2], dim=1), F.normalize(x[:, c2 // 2 :], dim=1)
        k = 2 * self.disp + 1
        patches = F.unfold(F.pad(f2, [self.disp] * 4), k).view(b, c2 // 2, k * k, h, w)
        cost = (patches * f1.unsqueeze(2)).sum(1)  # (B, K², h, w)
        prob = torch.softmax(cost * self.log_temperature.exp(), dim=1)
        flow = torch.einsum("bkhw,dk->bdhw", prob, self.offsets)
        return torch.cat([flow, cost, x[:, : c2 // 2]], 1)


class ResidualFlowConv(nn.Module):
    """x = [flow (2), features]: a dilated conv updates the features; flow passes through."""

    def __init__(self, cin: int, cout: int, dilation: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=dilation, dilation=dilation)
        self.act = nn.LeakyReLU(0.1)

    def forward(self, x: Tensor) -> Tensor:
        return torch.cat([x[:, :2], self.act(self.conv(x))], 1)


class FlowHead(nn.Module):
    """[flow, features] -> flow + a learned correction (initialised to zero: start from soft-argmax)."""

    def __init__(self, cin: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, 2, 3, padding=1)
        nn.init.zeros_(self.conv.weight)
        nn.init.zeros_(self.conv.bias)

    def forward(self, x: Tensor) -> Tensor:
        return x[:, :2] + self.conv(x)


class UpsampleFlow(nn.Module):
    """Bilinear upsampling by ``factor``; vectors are scaled to full-resolution pixels."""

    def __init__(self, factor: int) -> None:
        super().__init__()
        self.factor = factor

    def forward(self, flow: Tensor) -> Tensor:
        return F.interpolate(flow, scale_factor=self.factor, mode="bilinear", align_corners=False) * self.factor


def correlation_flow_net(
    widths: tuple[int, ...] = (16, 16, 32, 32), disp: int = 4, refine: tuple[int, ...] = (64, 64, 48, 32),
    dilations: tuple[int, ...] = (1, 2, 4, 8),
) -> nn.Sequential:  # fmt: skip
    """Siamese encoder (stride 2 every other layer, down to 1/4) -> cost volume -> dilated refinement."""
    layers: list[nn.Module] = []
    cin = 3
    for i, width in enumerate(widths):
        layers.append(SiameseConv(cin, width, stride=2 if i % 2 == 0 else 1))
        cin = width
    factor = 2 ** ((len(widths) + 1) // 2)
    layers.append(CostVolume(disp))
    cin = 2 + (2 * disp + 1) ** 2 + cin
    for width, dilation in zip(refine, dilations, strict=True):
        layers.append(ResidualFlowConv(cin, width, dilation))
        cin = 2 + width
    layers += [FlowHead(cin), UpsampleFlow(factor)]
    return nn.Sequential(*layers)


FLOW_NETS: dict[str, Callable[[], nn.Sequential]] = {
    # CPU, real time at 128x128 on 2 cores (forward + backward + Adam).
    "fast": lambda: correlation_flow_net(),
    # GPU: wider features, a wider search and a deeper dilated refinement.
    "strong": lambda: correlation_flow_net(
        widths=(32, 32, 64, 64), disp=6, refine=(128, 128, 96, 96, 64, 64), dilations=(1, 2, 4, 8, 16, 1)
    ),
}


def build_flow_net(name: str = "fast") -> nn.Sequential:
    """A freshly initialised flow network by name (see ``FLOW_NETS``)."""
    if name not in FLOW_NETS:
        raise ValueError(f"unknown flow net {name!r}; choose one of {', '.join(FLOW_NETS)}")
    return FLOW_NETS[name]()
