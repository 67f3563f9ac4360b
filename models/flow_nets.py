"""Flow networks as ``nn.Sequential`` so the PARTIME engine can cut them at any layer boundary.

Input (B, 6, H, W): previous and current RGB in [0, 1]; output (B, 2, H, W): flow (u, v) in pixels
from the previous frame to the current one. Every layer passes ONE tensor to the next, so a stage
boundary can fall anywhere; what a later layer needs travels inside that tensor as channels (the
input frames ride along space-to-depth packed, see :class:`Carry`).

Design (why): a net that only stacks 3x3 convs sees ~17 px and learns online slowly and unstably.
These nets (1) encode both frames with shared (siamese) convs down to 1/4 resolution, (2) build a
parameter-free local cost volume there (±``disp`` cells = ±4·disp px), (3) read it with a
soft-argmax into an initial flow, so matching works from the first frames, (4) refine with dilated
convs (receptive field > 100 px) that add a residual to that flow, then (5) warp the current frame
with the upsampled flow at 1/2 resolution and refine again from the warped residual image, which
gives the sub-pixel precision the coarse cost volume lacks; (6) upsample to full resolution.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .flow_loss import warp


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


class Carry(nn.Module):
    """Run ``inner`` on the leading channels; the trailing ``carried`` channels (the input frames,
    space-to-depth packed to the current resolution) pass through, re-packed when ``inner``
    downsamples. ``carried=0`` starts the carry: the whole input is both processed and carried."""

    def __init__(self, inner: nn.Module, carried: int) -> None:
        super().__init__()
        self.inner, self.carried = inner, carried

    def forward(self, x: Tensor) -> Tensor:
        if self.carried:
            x, frames = x[:, : -self.carried], x[:, -self.carried :]
        else:
            frames = x
        y = self.inner(x)
        ratio = frames.shape[-1] // y.shape[-1]
        if ratio > 1:
            frames = F.pixel_unshuffle(frames, ratio)
        return torch.cat([y, frames], 1)


class CostVolume(nn.Module):
    """Features (B, 2C, h, w) -> [soft-argmax flow (2), cost (K²), previous features (C)], K = 2·disp+1.

    Correlations of features normalised per channel over the image (removes the DC part that
    would make every displacement look alike) and then to unit length; the soft-argmax
    temperature is learned. Flow channels are in cells of this resolution.
    """

    def __init__(self, disp: int) -> None:
        super().__init__()
        self.disp = disp
        self.log_temperature = nn.Parameter(torch.tensor(2.5))
        k = 2 * disp + 1
        dy, dx = torch.meshgrid(torch.arange(k) - disp, torch.arange(k) - disp, indexing="ij")
        self.register_buffer("offsets", torch.stack([dx.flatten(), dy.flatten()]).float(), persistent=False)

    @staticmethod
    def _normalise(f: Tensor) -> Tensor:
        f = f - f.mean(dim=(2, 3), keepdim=True)
        return F.normalize(f, dim=1)

    def forward(self, x: Tensor) -> Tensor:
        b, c2, h, w = x.shape
        f1, f2 = self._normalise(x[:, : c2 // 2]), self._normalise(x[:, c2 // 2 :])
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
    """[flow, features] -> flow + a learned correction (initialised to zero: start from the input flow)."""

    def __init__(self, cin: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, 2, 3, padding=1)
        nn.init.zeros_(self.conv.weight)
        nn.init.zeros_(self.conv.bias)

    def forward(self, x: Tensor) -> Tensor:
        return x[:, :2] + self.conv(x)


class WarpFrames(nn.Module):
    """[flow (2) at 1/f, carried frames packed by f] -> [flow, previous, warped current, their
    difference] at 1/``out_factor`` resolution: what a refinement needs to see its own residual."""

    def __init__(self, factor: int, out_factor: int) -> None:
        super().__init__()
        self.factor, self.out_factor = factor, out_factor

    def forward(self, x: Tensor) -> Tensor:
        frames = F.pixel_shuffle(x[:, 2 : 2 + 6 * self.factor**2], self.factor)
        if self.out_factor > 1:
            frames = F.avg_pool2d(frames, self.out_factor)
        up = self.factor // self.out_factor
        flow = F.interpolate(x[:, :2], scale_factor=up, mode="bilinear", align_corners=False) * up
        prev, warped = frames[:, :3], warp(frames[:, 3:], flow)
        return torch.cat([flow, prev, warped, warped - prev], 1)


class UpsampleFlow(nn.Module):
    """Bilinear upsampling by ``factor``; vectors are scaled to full-resolution pixels."""

    def __init__(self, factor: int) -> None:
        super().__init__()
        self.factor = factor

    def forward(self, flow: Tensor) -> Tensor:
        if self.factor == 1:
            return flow
        return F.interpolate(flow, scale_factor=self.factor, mode="bilinear", align_corners=False) * self.factor


def correlation_flow_net(
    widths: tuple[int, ...] = (16, 16, 32, 32),
    disp: int = 4,
    context: tuple[int, ...] = (64, 64, 48, 32),
    dilations: tuple[int, ...] = (1, 2, 4, 8),
    refine: tuple[int, ...] = (32, 32),
    refine_factor: int = 2,
) -> nn.Sequential:
    """Siamese encoder (stride 2 every other layer) -> cost volume -> dilated context refinement
    -> warp-and-refine at 1/``refine_factor`` -> full resolution. H and W must divide by 4."""
    layers: list[nn.Module] = []
    cin, carried = 3, 0
    for i, width in enumerate(widths):
        layers.append(Carry(SiameseConv(cin, width, stride=2 if i % 2 == 0 else 1), carried))
        cin = width
        carried = 6 * 4 ** ((i + 2) // 2)
    factor = 2 ** ((len(widths) + 1) // 2)
    layers.append(Carry(CostVolume(disp), carried))
    cin = 2 + (2 * disp + 1) ** 2 + cin
    for width, dilation in zip(context, dilations, strict=True):
        layers.append(Carry(ResidualFlowConv(cin, width, dilation), carried))
        cin = 2 + width
    layers += [Carry(FlowHead(cin), carried), WarpFrames(factor, refine_factor)]
    cin = 2 + 9
    for i, width in enumerate(refine):
        layers.append(ResidualFlowConv(cin, width, dilation=2**i))
        cin = 2 + width
    layers += [FlowHead(cin), UpsampleFlow(refine_factor)]
    return nn.Sequential(*layers)


FLOW_NETS: dict[str, Callable[[], nn.Sequential]] = {
    # CPU, real time at 128x128 on 2 cores (forward + backward + Adam).
    "fast": lambda: correlation_flow_net(),
    # GPU: wider features, a wider search, a deeper dilated context and a full-resolution refinement.
    "strong": lambda: correlation_flow_net(
        widths=(32, 32, 64, 64),
        disp=6,
        context=(128, 128, 96, 96, 64, 64),
        dilations=(1, 2, 4, 8, 16, 1),
        refine=(48, 48, 32),
        refine_factor=1,
    ),
}


def build_flow_net(name: str = "fast") -> nn.Sequential:
    """A freshly initialised flow network by name (see ``FLOW_NETS``)."""
    if name not in FLOW_NETS:
        raise ValueError(f"unknown flow net {name!r}; choose one of {', '.join(FLOW_NETS)}")
    return FLOW_NETS[name]()
