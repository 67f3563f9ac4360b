"""Flow networks as ``nn.Sequential`` so the PARTIME engine can cut them at any layer boundary.

Input (B, 6, H, W): previous and current RGB in [0, 1]; output (B, 2, H, W): flow (u, v) in pixels
from the previous frame to the current one. Every layer passes ONE full-resolution tensor
``[flow (2), frames (6), extra]`` to the next, so a stage boundary can fall anywhere; a level's
features at 1/f resolution travel inside it losslessly as ``pixel_shuffle``-packed channels.

Design (why): a net that only stacks 3x3 convs sees ~17 px and learns online slowly and unstably.
These nets are coarse-to-fine (PWC-Net style): at 1/4, 1/2 and full resolution (the service's ``fast``
net starts at 1/8) they compute small siamese features of both frames, warp the current frame's
features by the flow so far, correlate locally (a parameter-free cost volume, +-radius cells), read the
cost with a soft-argmax into a residual flow, and add a learned correction (initialised to zero).
Matching thus works from the first frames and the coarse levels reach large motions. Lucas-Kanade steps
(damped least squares over a window, on RGB plus learned channels) add the sub-pixel precision that a
soft-argmax over whole cells lacks. Two layers end the net: the edge-aware fill (``models.flow_cleanup``)
gives flat regions, where matching has no evidence, the motion of their textured surroundings; then,
as real cameras mostly watch a static scene, the still gate (``models.still_gate``) keeps that scene exactly
still. The service's net then ends as DIS does, with a variational refinement (``models.variational``).

Stage boundaries: the full-resolution layers set ``keep_with_next``, so automatic balancing never ends
a stage inside the full-resolution level. The two-frame-old gradient of a pixel-precise refinement,
pushed through the coarse levels of another frame, drives them astray, whereas over the delay the
motion stays within the cells of the coarser levels; a stale stage holding the full-resolution
features but not their match learns worse than one that ends before them.

Deep supervision (``supervision``): every refinement below full resolution also learns from the
loss of its own estimate at its own resolution (``models.deep_supervision``), so the coarse levels get
a gradient of the frame their stage is processing, not only the one the later stages send 2(D-1-h)
frames late; it keeps a stale stage stable at the sequential rate, also when the frames it sees are
far apart (a service that drops frames): without it, PARTIME D = 2 from scratch fed every second frame
of the demo diverged (its loss 29 times zero flow's by the third loop) while D = 1 kept learning
(bench/results/skipped-frames.md). The loss is taken at the level's own resolution and scale only,
not at full resolution, so it costs little.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .correlation import local_correlation
from .deep_supervision import supervise
from .exposure import match_exposure
from .flow_cleanup import EdgeAwareFill, box_mean, central_differences, frames_of
from .flow_loss import online_loss, warp
from .propagation import FlowPropagation
from .still_gate import StillGate
from .variational import VariationalRefinement


def _pool(t: Tensor, factor: int) -> Tensor:
    return F.avg_pool2d(t, factor) if factor > 1 else t


def _downsample_flow(flow: Tensor, factor: int) -> Tensor:
    """Area averaging; vectors scaled to the coarser grid's pixels."""
    return _pool(flow, factor) / factor


def _upsample_flow(flow: Tensor, factor: int) -> Tensor:
    """Bilinear upsampling; vectors scaled to the finer grid's pixels."""
    if factor == 1:
        return flow
    return F.interpolate(flow, scale_factor=factor, mode="bilinear", align_corners=False) * factor


def _refined(flow: Tensor, frames: Tensor, factor: int, supervision: float) -> Tensor:
    """[flow at 1/factor, brought to full resolution, frames]; with ``supervision`` > 0 the flow also
    learns from its own loss on the frames at 1/factor (see ``models.deep_supervision``)."""
    full = _upsample_flow(flow, factor)
    own = supervise(full, lambda: online_loss(flow, _pool(frames.detach(), factor), levels=1), supervision)
    return torch.cat([own, frames], 1)


def _siamese(convs: nn.Module, frames: Tensor) -> tuple[Tensor, Tensor]:
    """The same convs on the previous and the current frame (B, 6, h, w)."""
    b, _, h, w = frames.shape
    feats = convs(frames.reshape(b * 2, 3, h, w))
    feats = feats.reshape(b, 2, -1, h, w)
    return feats[:, 0], feats[:, 1]


class ChannelsLastConv2d(nn.Conv2d):
    """A conv that runs in channels-last memory format on CPU (input and output stay in the default layout).

    Why: oneDNN's backward of a 3x3 conv with four channels or fewer on a side is several times its forward in
    the default layout, and about half that in channels-last, layout copies included. The fast net's learning step
    on one thread at 128x96 took 41.7 ms so and 44.8 ms with every conv in the default layout; whole nets in
    channels-last were slower, 47.5 ms: the wider convs and every other op lose (``bench/results/
    learning-step-cpu-128x96.md``, ways eager-1t, plain-convs-1t and channels-last-1t; at 160x120, 60.9 ms and
    63.8 ms in ``learning-step-cpu.md``, where two stages' steps differed within the machine's noise)."""

    def forward(self, x: Tensor) -> Tensor:
        if x.device.type != "cpu":
            return super().forward(x)
        return super().forward(x.contiguous(memory_format=torch.channels_last)).contiguous()


def _conv3x3(cin: int, cout: int) -> nn.Conv2d:
    """A 3x3 conv, channels-last where a side has four channels or fewer (``ChannelsLastConv2d``)."""
    conv = ChannelsLastConv2d if min(cin, cout) <= 4 else nn.Conv2d
    return conv(cin, cout, 3, padding=1)


def _feature_convs(width: int) -> nn.Sequential:
    return nn.Sequential(_conv3x3(3, width), nn.LeakyReLU(0.1), _conv3x3(width, width))


class StartFlow(nn.Module):
    """frames (B, 6, H, W) -> [zero flow (2), frames (6)]: the estimate every level refines, beside the frames every
    layer compares, the current one brought to the previous one's exposure (``match_exposure``)."""

    def forward(self, x: Tensor) -> Tensor:
        return torch.cat([x.new_zeros(x.shape[0], 2, *x.shape[-2:]), match_exposure(x)], 1)


class PairFeatures(nn.Module):
    """[flow, frames] -> [flow, frames, features of both frames at 1/factor, packed to full resolution]."""

    def __init__(self, factor: int, width: int) -> None:
        super().__init__()
        if (2 * width) % (factor * factor):
            raise ValueError(f"2 x width ({2 * width}) must divide by factor² ({factor * factor}) to pack losslessly")
        self.factor = factor
        self.convs = _feature_convs(width)

    def forward(self, x: Tensor) -> Tensor:
        f0, f1 = _siamese(self.convs, _pool(frames_of(x), self.factor))
        packed = torch.cat([f0, f1], 1)
        if self.factor > 1:
            packed = F.pixel_shuffle(packed, self.factor)
        return torch.cat([x[:, :8], packed], 1)


class CostVolumeMatch(nn.Module):
    """[flow, frames, packed features] -> [refined flow, frames].

    At 1/factor: warp the current features by the flow so far, correlate (features normalised per
    channel over the image, which removes the DC part that makes every offset look alike, then to
    unit length), soft-argmax the cost into a residual (learned temperature), and add a learned
    correction from the cost, the previous frame's features and the flow, bounded to the search radius
    (``radius`` · tanh(head / ``radius``)).

    Why bounded: beyond the cells it searched the match has no evidence, and the head sees the absolute flow,
    so online it can learn to cancel a motion the recent frames did not have. Unbounded, the full-resolution
    match of a PARTIME D = 2 learner from scratch once took 4.8 px off a patch that the coarse levels had
    right (generated chelsea stream, seed 2, frames ~236-254), for twenty frames; bounded, D = 2 follows the
    sequential learner there. Measured by ``bench.flow`` (``bench/results/flow-*.md``)."""

    def __init__(self, factor: int, width: int, radius: int, head: int, supervision: float = 0.0) -> None:
        super().__init__()
        self.factor, self.width, self.radius, self.supervision = factor, width, radius, supervision
        self.log_temperature = nn.Parameter(torch.tensor(2.5))
        k = 2 * radius + 1
        dy, dx = torch.meshgrid(torch.arange(k) - radius, torch.arange(k) - radius, indexing="ij")
        self.register_buffer("offsets", torch.stack([dx.flatten(), dy.flatten()]).float(), persistent=False)
        self.head = nn.Sequential(_conv3x3(k * k + width + 2, head), nn.LeakyReLU(0.1), _conv3x3(head, 2))
        nn.init.zeros_(self.head[-1].weight)
        nn.init.zeros_(self.head[-1].bias)

    @staticmethod
    def _normalise(f: Tensor) -> Tensor:
        """Centred over the image, then unit length per pixel (as ``F.normalize``, whose vector norm was the
        slowest op of the step on CPU: 4.8 ms forward and backward at 128x96 against 0.8 ms for this)."""
        centred = f - f.mean(dim=(2, 3), keepdim=True)
        return centred * torch.rsqrt((centred * centred).sum(1, keepdim=True).clamp_min(1e-24))

    def forward(self, x: Tensor) -> Tensor:
        packed = x[:, 8:]
        if self.factor > 1:
            packed = F.pixel_unshuffle(packed, self.factor)
        f0, f1 = packed[:, : self.width], packed[:, self.width :]
        flow = _downsample_flow(x[:, :2], self.factor)
        cost = local_correlation(self._normalise(f0), self._normalise(warp(f1, flow)), self.radius)
        prob = torch.softmax(cost * self.log_temperature.exp(), dim=1)
        flow = flow + torch.einsum("bkhw,dk->bdhw", prob, self.offsets)
        flow = flow + self.radius * torch.tanh(self.head(torch.cat([cost, f0, flow], 1)) / self.radius)
        return _refined(flow, frames_of(x), self.factor, self.supervision)


class LucasKanadeStep(nn.Module):
    """[flow, frames] -> [refined flow, frames]: one damped Lucas-Kanade update at 1/factor.

    Channels: RGB plus ``width`` learned features of both frames (none at all costs least: the service's net takes
    its full-resolution step on RGB alone). Sums of the gradient products
    over a ``window`` give per pixel the 2x2 normal equations of the linearised brightness
    constancy; ``log_damping`` (learned) keeps texture-less regions from taking wild steps. It starts
    at e^-9: e^-6 damped the steps of smooth images to a fraction (EPE 0.35 vs 0.27 on a held-out
    stream), e^-12 was no better than e^-9."""

    def __init__(self, factor: int, width: int, window: int, supervision: float = 0.0) -> None:
        super().__init__()
        self.factor, self.window, self.supervision = factor, window, supervision
        self.convs = _feature_convs(width) if width else None
        self.log_damping = nn.Parameter(torch.tensor(-9.0))

    def forward(self, x: Tensor) -> Tensor:
        small = _pool(frames_of(x), self.factor)
        flow = _downsample_flow(x[:, :2], self.factor)
        i0, i1 = small[:, :3], small[:, 3:]
        if self.convs is not None:
            f0, f1 = _siamese(self.convs, small)
            i0, i1 = torch.cat([i0, f0], 1), torch.cat([i1, f1], 1)
        i1 = warp(i1, flow)
        ix, iy = central_differences(0.5 * (i0 + i1))
        it = i1 - i0
        products = (ix * ix, ix * iy, iy * iy, ix * it, iy * it)
        terms = torch.stack([p.sum(1) for p in products], 1)
        sxx, sxy, syy, sxt, syt = box_mean(terms, self.window).unbind(1)
        damping = self.log_damping.exp()
        sxx, syy = sxx + damping, syy + damping
        det = sxx * syy - sxy * sxy
        step = torch.stack([sxy * syt - syy * sxt, sxy * sxt - sxx * syt], 1) / det.unsqueeze(1)
        return _refined(flow + step, frames_of(x), self.factor, self.supervision)


class TakeFlow(nn.Module):
    """[flow, frames] -> flow."""

    def forward(self, x: Tensor) -> Tensor:
        return x[:, :2]


def pyramid_flow_net(
    factors: tuple[int, ...] = (4, 2, 1),
    widths: tuple[int, ...] = (16, 16, 8),
    radii: tuple[int, ...] = (3, 3, 2),
    heads: tuple[int, ...] = (32, 32, 16),
    lk_steps: int = 0,
    lk_width: int = 16,
    lk_full_width: int | None = 16,
    window: int = 7,
    supervision: float = 0.0,
    fill: bool = False,
    fill_farther: tuple[int, ...] = (),
    fill_verified: tuple[int, ...] = (),
    still: bool = False,
    still_follows_camera: bool = False,
    refine: bool = False,
    propagate: bool = False,
) -> nn.Sequential:
    """Coarse-to-fine levels (features, then cost-volume match), each followed by ``lk_steps`` Lucas-Kanade steps with
    ``lk_width`` learned channels (``lk_full_width`` at full resolution, where they cost the most: 0 for RGB alone,
    None for no steps there); at full resolution ``fill`` carries flow from textured, well-matched pixels into flat
    ones along the image's edges (from ``fill_farther`` dilations too where nothing confident is near; at
    ``fill_verified`` dilations only a neighbour's flow that explains the pixel), then ``still`` gates the flow to
    zero where nothing moved (``models.still_gate``; with ``still_follows_camera``, to the camera's motion). The
    gate comes last: a fill after it took the gate's zeros, well matched on the still background, for confident flow
    and spread them into slow movers, halving their motion (on tree's first 30 pairs the moving pixels' mean
    projection on the pseudo-GT fell from 1.03 to 0.49 in the fill; docs/models.md#the-still-gate-comes-last). With
    ``refine``, the flow then goes to the minimum of a variational energy around it, as DIS's last step takes its own
    (``models.variational``). With ``propagate``, the coarsest level's flow is taken back from the background around
    a fast mover (``models.propagation``) before the finer levels refine it. Every refinement below full resolution
    also learns from the loss of its own estimate, weighted ``supervision``. H and W must divide by max(factors)."""
    layers: list[nn.Module] = [StartFlow()]
    for factor, width, radius, head in zip(factors, widths, radii, heads, strict=True):
        own = supervision if factor > 1 else 0.0  # at full resolution the objective itself supervises
        level = [PairFeatures(factor, width), CostVolumeMatch(factor, width, radius, head, own)]
        lk = lk_width if factor > 1 else lk_full_width
        level += [LucasKanadeStep(factor, lk, window, own) for _ in range(lk_steps if lk is not None else 0)]
        level += [EdgeAwareFill(farther=fill_farther, verified=fill_verified)] if fill and factor == 1 else []
        level += [StillGate(follows_camera=still_follows_camera, hands_on_keep=refine)] if still and factor == 1 else []
        level += [VariationalRefinement(after_gate=still)] if refine and factor == 1 else []
        level += [FlowPropagation()] if propagate and factor == factors[0] else []
        for layer in level:  # no stage ends inside the full-resolution level (module docstring)
            layer.keep_with_next = factor == 1
        layers += level
    return nn.Sequential(*layers, TakeFlow())


FLOW_NETS: dict[str, Callable[[], nn.Sequential]] = {
    # The service's net: real time on 2 CPU cores at the learning sizes the service picks. Small searches at 1/2 and
    # full resolution and a slim full-resolution level (the coarse levels already bring the flow within a pixel);
    # after the 1/8 level, propagation takes a fast mover's motion back from the background around it
    # (models.propagation); one Lucas-Kanade step per level for sub-pixel precision (on RGB alone at full
    # resolution, where learned channels cost the most); at full resolution the edge-aware fill (flat regions take
    # the motion of their textured surroundings; from 4 and 8 px away only a flow that explains them), then the still
    # gate (a static camera's background stays exactly still, a shaking camera's moves with it, a mover keeps its
    # motion; docs/models.md#the-still-gate-leaves-changed-places-alone), and the variational refinement DIS ends
    # with, which evens out the flow across a surface where the windows left noise (models.variational). Shipped
    # pretrained (models.pretrain); measured on real clips by bench.realflow.
    "fast": lambda: pyramid_flow_net(
        factors=(8, 4, 2, 1),
        widths=(32, 16, 16, 4),
        radii=(4, 3, 2, 1),
        heads=(32, 32, 24, 8),
        lk_steps=1,
        lk_width=8,
        lk_full_width=0,
        supervision=0.3,
        still=True,
        still_follows_camera=True,
        fill=True,
        refine=True,
        propagate=True,
        fill_verified=(4, 8),
    ),
    # The research net of the synthetic benchmark (bench.flow), learned from scratch: two Lucas-Kanade steps
    # per level, and the same fill and still gate as the service's net (the generated streams have flat
    # regions too; bench/results/flow-*.md), the fill reaching up to 127 px where nothing confident is nearer (a photo's
    # sky; docs/models.md#a-flat-sky-is-filled-from-further-away). Both nets' coarse levels also learn from their own
    # loss (deep supervision), which keeps a stale stage stable.
    "strong": lambda: pyramid_flow_net(lk_steps=2, supervision=0.3, still=True, fill=True, fill_farther=(16, 32, 64)),
}


def size_multiple(net: nn.Sequential) -> int:
    """What a flow net's input sides must divide by: its coarsest level's factor."""
    return max(getattr(layer, "factor", 1) for layer in net)


#: The shipped pretrained weights, ``<net>.pt`` and how they were made, ``<net>.json`` (``models.pretrain``).
WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"
#: How a new learner starts: the shipped weights, or random ones (the research setting of PARTIME's experiment).
INITS = ("pretrained", "scratch")


def build_flow_net(name: str = "fast", init: str = "pretrained") -> nn.Sequential:
    """A flow network by name (see ``FLOW_NETS``): with the shipped pretrained weights, or freshly initialised
    (``scratch``, drawn from torch's global generator)."""
    if name not in FLOW_NETS:
        raise ValueError(f"unknown flow net {name!r}; choose one of {', '.join(FLOW_NETS)}")
    if init not in INITS:
        raise ValueError(f"unknown init {init!r}; choose one of {', '.join(INITS)}")
    net = FLOW_NETS[name]()
    if init == "pretrained":
        path = WEIGHTS_DIR / f"{name}.pt"
        if not path.is_file():
            raise ValueError(f"no pretrained weights for the {name!r} net (make pretrain writes {path.name})")
        net.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
    return net
