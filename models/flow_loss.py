"""Unsupervised flow loss: brightness constancy (Charbonnier) plus first-order smoothness.

Why this loss: the stream has no labels, so the flow is learned by asking that the current frame,
warped back by the flow, reproduces the previous frame (PARTIME V.E, Marullo et al. 2022).
``flow_loss(flow, frames)`` has the engine's ``loss_fn(output, target)`` signature: the target is the
same (B, 6, H, W) frame pair the network saw.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import FunctionCtx

from .luma import luma
from .padding import replicate_pad

_GRIDS: dict[tuple, Tensor] = {}


def _cached() -> torch.inference_mode:
    """Where a cached tensor is made: never in inference mode, whatever the caller's (a shown sample forwards in
    it), or a graph that reads the tensor later could not keep it for its backward."""
    return torch.inference_mode(False)


def pixel_grid(height: int, width: int, device: torch.device, dtype: torch.dtype) -> Tensor:
    """(1, 2, H, W) pixel coordinates (x, y), cached per size/device/dtype (``_cached``)."""
    key = (height, width, device, dtype)
    grid = _GRIDS.get(key)
    if grid is None:
        with _cached():
            ys, xs = torch.meshgrid(
                torch.arange(height, device=device, dtype=dtype),
                torch.arange(width, device=device, dtype=dtype),
                indexing="ij",
            )
            grid = _GRIDS[key] = torch.stack([xs, ys])[None]
    return grid


_BOUNDS: dict[tuple, tuple[Tensor, Tensor]] = {}


def _warp_bounds(height: int, width: int, device: torch.device, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """(1, 2, 1, 1) the last position ``_InsideReach`` keeps, (w, h), and the scale of pixel positions to
    ``grid_sample``'s [-1, 1], cached per size/device/dtype: a warp runs about fifteen times a step, and making two
    small tensors each time cost more ops than the rest of the warp."""
    key = (height, width, device, dtype)
    bounds = _BOUNDS.get(key)
    if bounds is None:
        with _cached():
            high = torch.tensor([float(width), float(height)], device=device, dtype=dtype).view(1, 2, 1, 1)
            scale = torch.tensor([2.0 / max(width - 1, 1), 2.0 / max(height - 1, 1)], device=device, dtype=dtype)
            bounds = _BOUNDS[key] = (high, scale.view(1, 2, 1, 1))
    return bounds


class _InsideReach(torch.autograd.Function):
    """Positions (B, 2, H, W) with NaN made -1 and every coordinate clamped to [-1, size]: grid_sample's CPU backward
    crashes the process on NaN or huge coordinates, and border padding makes every position beyond one pixel
    outside the frame alike, so this changes nothing for finite flow. The gradient passes unchanged: a position
    it changed lies outside the frame, where border sampling's gradient is zero anyway, so autograd's own backward of
    the two ops (a mask each, in every warp of every step) would only multiply by one."""

    @staticmethod
    def forward(ctx: FunctionCtx, pos: Tensor, high: Tensor) -> Tensor:
        return torch.minimum(pos.nan_to_num(-1.0).clamp_min_(-1.0), high)

    @staticmethod
    def backward(ctx: FunctionCtx, grad: Tensor) -> tuple[Tensor, None]:
        return grad, None


def warp(image: Tensor, flow: Tensor) -> Tensor:
    """Backward warp: output(x) = image(x + flow(x)), bilinear, border padding.

    With ``image`` the current frame and ``flow`` the previous->current flow, the result is the
    current frame brought back onto the previous one.
    """
    if image.shape[0] != flow.shape[0] or image.shape[-2:] != flow.shape[-2:] or flow.shape[1] != 2:
        raise ValueError(f"image {tuple(image.shape)} and flow {tuple(flow.shape)} do not match (flow is B,2,H,W)")
    _, _, h, w = flow.shape
    pos = pixel_grid(h, w, flow.device, flow.dtype) + flow
    high, _ = _warp_bounds(h, w, flow.device, flow.dtype)
    # A diverged (NaN/inf) flow must not crash grid_sample's backward: the worker's non-finite-loss guard then
    # restores the last good weights. The bounds come in as an argument: looked up inside, a first lookup under
    # ``torch.compile`` made the cached tensors inside the function's traced graph, which inductor refused.
    return sample_at(image, _InsideReach.apply(pos, high))


def sample_at(image: Tensor, pos: Tensor, padding_mode: str = "border") -> Tensor:
    """``image`` (B, C, H, W) read at pixel positions ``pos`` (B, 2, H, W; x, y), bilinear: the one place pixel
    positions become ``grid_sample``'s [-1, 1] grid."""
    _, scale = _warp_bounds(*pos.shape[-2:], pos.device, pos.dtype)
    grid = (pos * scale - 1.0).permute(0, 2, 3, 1)
    return F.grid_sample(image, grid, mode="bilinear", padding_mode=padding_mode, align_corners=True)


def charbonnier(diff: Tensor, eps: float = 1e-3, alpha: float = 0.5) -> Tensor:
    """(d² + ε²)^α elementwise: a differentiable L1 that tolerates outliers (occlusions)."""
    return (diff * diff + eps * eps) ** alpha


def flow_lengths(flow: Tensor) -> Tensor:
    """(B, 1, H, W): the length of each vector of ``flow`` (B, 2, H, W), in px. Not ``torch.linalg.vector_norm`` over
    the components: on a CPU that reduction took 1.7 ms for a 128x96 flow, the sum of squares 25 us (exploratory:
    docs/notebook/2026-11-29-the-cpus-own-loops.md). The floor under the sum keeps a zero vector's gradient zero, as
    the norm's is (its length: 1e-15 px)."""
    return flow.square().sum(1, keepdim=True).clamp_min(1e-30).sqrt()


def in_frame_mask(flow: Tensor) -> Tensor:
    """(B, 1, H, W) 1 where x + flow lands inside the frame: elsewhere the warp only sees padding."""
    _, _, h, w = flow.shape
    pos = pixel_grid(h, w, flow.device, flow.dtype) + flow.detach()
    inside = (pos[:, :1] >= 0) & (pos[:, :1] <= w - 1) & (pos[:, 1:] >= 0) & (pos[:, 1:] <= h - 1)
    return inside.to(flow.dtype)


def landing_density(flow: Tensor) -> Tensor:
    """(B, 1, H, W) how many previous-frame pixels the flow brings onto each current-frame pixel (bilinear splats of
    weight one; about 1 where the motion is smooth, 2 where a mover covers what was behind it).

    Capture-safe: the splat targets are data, but every shape is fixed (``scatter_add_``, no masked indexing)."""
    b, _, h, w = flow.shape
    pos = pixel_grid(h, w, flow.device, flow.dtype) + flow.detach().nan_to_num(0.0)
    pos = torch.minimum(pos.clamp_min(-1.0), _warp_bounds(h, w, flow.device, flow.dtype)[0])
    corner = pos.floor()
    frac = pos - corner
    density = flow.new_zeros(b, h * w)
    for dx, dy in ((0, 0), (1, 0), (0, 1), (1, 1)):
        x, y = corner[:, :1] + dx, corner[:, 1:] + dy
        weight = (frac[:, :1] if dx else 1 - frac[:, :1]) * (frac[:, 1:] if dy else 1 - frac[:, 1:])
        weight = weight * ((x >= 0) & (x <= w - 1) & (y >= 0) & (y <= h - 1)).to(flow.dtype)
        index = (y.clamp(0, h - 1) * w + x.clamp(0, w - 1)).long()
        density.scatter_add_(1, index.view(b, -1), weight.view(b, -1))
    return density.view(b, 1, h, w)


def visible_mask(flow: Tensor) -> Tensor:
    """(B, 1, H, W) in [0, 1]: 0 where a previous-frame pixel lands where another one lands too, 1 where it lands
    alone (the forward flow's range map: 2 - density, clamped).

    Why: a pixel a mover covers in the current frame has no match there, whatever its flow; its photometric error
    then pulls its flow, and its neighbours' through the smoothness, towards the mover (the smeared edge ahead of a
    fast hand). The occluded pixel and the mover's leading edge both land on the mover in the current frame, so both
    are left to the smoothness and the rest of the mover (UnFlow's and UFlow's occlusion masks do this with the
    backward flow, which an online learner would pay a second pass of the net for)."""
    return (2.0 - warp(landing_density(flow), flow.detach())).clamp(0.0, 1.0)


def photometric_loss(
    flow: Tensor, frames: Tensor, eps: float = 1e-3, alpha: float = 0.5, occlusion: bool = False
) -> Tensor:
    """Mean Charbonnier of warp(current, flow) - previous over pixels whose match is in the frame (and, with
    ``occlusion``, not covered in the current frame: ``visible_mask``)."""
    prev, cur = frames[:, :3], frames[:, 3:6]
    mask = in_frame_mask(flow) * (visible_mask(flow) if occlusion else 1.0)
    err = charbonnier(warp(cur, flow) - prev, eps, alpha) * mask
    return err.sum() / (mask.sum() * 3).clamp_min(1.0)


#: Side of the census patch: UFlow, ARFlow and SMURF compare 7x7 neighbourhoods.
CENSUS_PATCH = 7


def census(image: Tensor, patch: int = CENSUS_PATCH) -> Tensor:
    """(B, patch², H, W) soft ternary census of an RGB image in [0, 1].

    For every neighbour in the patch, the sign of its grey-level difference to the centre, softened
    as d / sqrt(0.81 + d²) (d in 0-255 grey levels). Why: it compares local structure, not brightness,
    so a flicker, an exposure change or a codec's DC shift leaves it unchanged where a photometric
    difference would call for motion."""
    grey = luma(image) * 255.0
    b, _, h, w = grey.shape
    r = patch // 2
    neighbours = F.unfold(replicate_pad(grey, [r] * 4), patch).view(b, patch * patch, h, w)
    d = neighbours - grey
    return d * torch.rsqrt(0.81 + d * d)


def census_distance(a: Tensor, b: Tensor, threshold: float = 0.1) -> Tensor:
    """(B, 1, H, W) soft Hamming distance between two census transforms, as a fraction of the patch."""
    sq = (a - b) ** 2
    return (sq / (threshold + sq)).mean(1, keepdim=True)


def census_loss(flow: Tensor, frames: Tensor, eps: float = 0.01, q: float = 0.4, occlusion: bool = False) -> Tensor:
    """Mean robust census distance (x + eps)^q between the previous frame and the current one warped
    back by the flow, over pixels whose match is inside the frame and whose patch is whole (and, with
    ``occlusion``, not covered in the current frame)."""
    prev, cur = frames[:, :3], frames[:, 3:6]
    mask = in_frame_mask(flow) * _inner(flow, CENSUS_PATCH // 2) * (visible_mask(flow) if occlusion else 1.0)
    err = (census_distance(census(prev), census(warp(cur, flow))) + eps) ** q * mask
    return err.sum() / mask.sum().clamp_min(1.0)


def _inner(t: Tensor, border: int) -> Tensor:
    """(1, 1, H, W) 1 except ``border`` pixels along the edges, where a patch reaches outside the image."""
    mask = t.new_zeros(1, 1, *t.shape[-2:])
    mask[..., border : t.shape[-2] - border, border : t.shape[-1] - border] = 1.0
    return mask


PHOTOMETRIC = {"charbonnier": photometric_loss, "census": census_loss}


def smoothness_loss(flow: Tensor, image: Tensor | None = None, edge_weight: float = 0.0) -> Tensor:
    """Quadratic first-order smoothness of the flow; with ``edge_weight`` > 0 it is relaxed across
    image edges (weights exp(-edge_weight·|∇I|)) so motion boundaries can follow object borders."""
    dx = flow[..., :, 1:] - flow[..., :, :-1]
    dy = flow[..., 1:, :] - flow[..., :-1, :]
    sx, sy = dx.pow(2).sum(1, keepdim=True), dy.pow(2).sum(1, keepdim=True)
    if edge_weight > 0 and image is not None:
        sx = sx * torch.exp(-edge_weight * (image[..., :, 1:] - image[..., :, :-1]).abs().mean(1, keepdim=True))
        sy = sy * torch.exp(-edge_weight * (image[..., 1:, :] - image[..., :-1, :]).abs().mean(1, keepdim=True))
    return 0.5 * (sx.mean() + sy.mean())


def flow_loss(
    flow: Tensor,
    frames: Tensor,
    *,
    smooth_weight: float = 0.5,
    edge_weight: float = 10.0,
    levels: int = 3,
    photometric: str = "charbonnier",
    occlusion: bool = False,
) -> Tensor:
    """Photometric term (``photometric``: ``charbonnier`` or ``census``; with ``occlusion``, over pixels that stay
    visible, ``visible_mask``) + ``smooth_weight`` · smoothness, averaged over ``levels`` scales.

    Why several scales: on the full-resolution image the photometric gradient only sees a few
    pixels around the current estimate; on 2x/4x downsampled frames (and flow / 2^k) it also pulls
    flows that are still far from the truth, which makes online learning from scratch converge.
    ``smooth_weight`` 0.5 is in the reference work's range (0.5-1): texture-less regions take their
    flow from their neighbours.
    """
    if frames.dim() != 4 or frames.shape[1] != 6:
        raise ValueError(f"frames must be (B, 6, H, W) (previous RGB, current RGB), got {tuple(frames.shape)}")
    if flow.shape[0] != frames.shape[0] or flow.shape[1] != 2 or flow.shape[-2:] != frames.shape[-2:]:
        raise ValueError(f"flow must be (B, 2, H, W) matching frames {tuple(frames.shape)}, got {tuple(flow.shape)}")
    data_term = PHOTOMETRIC[photometric]
    total = flow.new_zeros(())
    for level, level_frames in enumerate(_pyramid(frames, levels)):
        if level:
            flow = F.avg_pool2d(flow, 2) / 2
        photo = data_term(flow, level_frames, occlusion=occlusion)
        total = total + photo + smooth_weight * smoothness_loss(flow, level_frames[:, :3], edge_weight)
    return total / levels


def _pyramid(frames: Tensor, levels: int) -> Iterator[Tensor]:
    """The frame pair at up to ``levels`` scales, halved each time while the smaller side is still 8 or more."""
    for level in range(levels):
        if level:
            if min(frames.shape[-2:]) < 8:
                return
            frames = F.avg_pool2d(frames, 2)
        yield frames


MAX_FLOW_PX = 1e4  # no real motion is this large; such a flow means the weights have blown up
#: The data term of the online learners (the service's worker, the benchmarks, deep supervision).
ONLINE_PHOTOMETRIC = "charbonnier"


def online_loss(flow: Tensor, frames: Tensor, levels: int = 3) -> Tensor:
    """``flow_loss`` with the online learners' data term."""
    return flow_loss(flow, frames, levels=levels, photometric=ONLINE_PHOTOMETRIC)


def online_zero_flow_loss(frames: Tensor, levels: int = 3) -> Tensor:
    """``online_loss`` of zero flow, without its trivial parts: a zero flow warps nothing (every match lies in the
    frame) and costs no smoothness, so only the Charbonnier of the frames' differences remains. The service scores
    this baseline on every frame, where the full loss's warps and smoothness took most of its time
    (``tests/test_flow_loss.py`` holds the two equal)."""
    total = frames.new_zeros(())
    for level_frames in _pyramid(frames, levels):
        total = total + charbonnier(level_frames[:, 3:6] - level_frames[:, :3]).mean()
    return total / levels


def guarded_flow_loss(flow: Tensor, frames: Tensor) -> Tensor:
    """``online_loss``, but a blown-up flow (non-finite, or beyond ``MAX_FLOW_PX``) gives a NaN loss, which the
    service's learner answers by restoring its last good weights.

    Tensor arithmetic only, no decision on the host: a CUDA graph captures the step, and the host reads the loss
    later, from its copy. The loss is computed on the flow with the blown-up case zeroed, so ``grid_sample``,
    whose CPU backward crashes the process on NaN or huge coordinates, never sees such a flow."""
    return nan_if_blown_up(online_loss, flow, frames)


def nan_if_blown_up(loss_fn: Callable[[Tensor, Tensor], Tensor], flow: Tensor, target: Tensor) -> Tensor:
    """``loss_fn(flow, target)``, or NaN where ``flow`` is non-finite or beyond ``MAX_FLOW_PX`` (computed on the flow
    zeroed there: see ``guarded_flow_loss``)."""
    blown_up = ~(flow.detach().abs().amax() <= MAX_FLOW_PX)  # NaN compares false
    loss = loss_fn(torch.where(blown_up, torch.zeros_like(flow), flow), target)
    return torch.where(blown_up, torch.full_like(loss, float("nan")), loss)
