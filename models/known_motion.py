"""Pairs with a known flow, made from the stream's own frames: what the online learner learns from.

Why: the photometric loss the flow nets could learn from online has its optimum away from the true flow (a noisy
pair is explained best by a flow that follows the noise, a flickering one by a flow that follows the light), so every
step of it pulled the shipped weights away from where pretraining put them, more the faster they learned
(docs/models.md#learning-while-watching). A frame of the stream moved by a motion chosen here is a pair whose flow is
exact and whose look is the stream's own: its light, contrast, noise, blur, codec and colours. Learning to find that
motion is learning to see this camera's pictures, with a loss whose optimum is the true flow (Aleotti et al., "Learning
optical flow from still images", CVPR 2021, make training pairs from single pictures the same way, offline).

What one frame cannot show is borrowed from the stream's last real pair: its sensor noise, drawn afresh for each
frame of the made pair (a picture moved by a known motion carries the same noise into both frames, where a camera's
two frames have noise of their own), and its change of light between the frames along the rows (a flicker, a
rolling shutter's band, an exposure step), put on the made pair's second frame.

The motion: a camera's (a shift, a turn and a zoom about the centre, from a view a little off the frame's own) with a
mover on top (a square cut from elsewhere in the frame, moving on its own). Its sizes are the stream's own
(``StreamMotion``): the camera moves as much as the still gate read the stream's camera moving (a static camera's
made pairs stand still but for the mover: their still background teaches the still gate to stay still), the mover as
fast as the stream's fast pixels. A made pair is served again, as it was made, for a few pairs (``KnownMotion``):
under PARTIME the stage whose gradient is late then pushes it through the very pair it belongs to. Every op is a
tensor op on the frame's device, with no value read back to the host.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from .block_codec import round_trip
from .flow_cleanup import noise_correlation, pair_noise, warp_residual
from .flow_loss import flow_lengths, pixel_grid, sample_at, warp
from .luma import luma
from .order_statistics import kth_smallest

#: Spread of the view the made pair starts from, around the frame's own: a shift of this share of the shorter side and
#: a turn of this many radians (standard deviations), so that both of its frames are resampled alike.
VIEW_SHIFT, VIEW_TURN = 0.05, 0.05
#: Spread of the camera's turn and zoom between the two frames (radians; log of the scale) where it shifts a pixel or
#: more; less, in proportion (a still camera neither turns nor zooms).
TURN, ZOOM = 0.01, 0.01
#: A mover's side, as a share of the frame's shorter side (uniform between the two), and the least it moves, in pixels
#: (standard deviation per axis).
MOVER_SIDE, MOVER_FLOOR = (0.2, 0.36), 1.0
#: How fast ``StreamMotion`` follows the stream (its weight on the newest pair).
MOTION_WEIGHT = 0.1
#: The residual of two frames' Gaussian noise, mean absolute over the channels, per standard deviation of one frame's
#: noise: sqrt(2) · sqrt(2/pi).
NOISE_RESIDUAL_PER_SIGMA = 2 / math.sqrt(math.pi)
#: Rows averaged (a running mean) into the change of light along the rows.
LIGHT_ROWS = 9


@dataclass(frozen=True)
class KnownPair:
    """A made pair (1, 6, H, W), its exact flow from the first frame to the second (1, 2, H, W), and where that flow
    is known (1, 1, H, W; 0 where the first frame's pixel leaves the second). ``known``: False where it is served known
    nowhere (``KnownMotion``'s ``unknown``), said on the host, where ``valid`` is on the pair's device."""

    pair: Tensor
    flow: Tensor
    valid: Tensor
    known: bool = True

    def target(self) -> Tensor:
        """(1, 3, H, W): the flow and where it is known, as ``known_flow_loss`` reads them."""
        return torch.cat([self.flow, self.valid], 1)


def _similarity(turn: Tensor, zoom: Tensor, shift: Tensor, centre: Tensor) -> Tensor:
    """(2, 3): pixel x of a frame -> pixel of the source picture, centre + zoom · R(turn) (x - centre) + shift."""
    turn, zoom = turn.to(shift), zoom.to(shift)
    c, s = torch.cos(turn) * zoom, torch.sin(turn) * zoom
    linear = torch.stack([torch.stack([c, -s]), torch.stack([s, c])])
    return torch.cat([linear, (centre + shift - linear @ centre)[:, None]], 1)


def _apply(affine: Tensor, points: Tensor) -> Tensor:
    """(2, 3) affine of points (2, H, W)."""
    return torch.einsum("ij,jhw->ihw", affine[:, :2], points) + affine[:, 2, None, None]


def _inside(points: Tensor, height: int, width: int) -> Tensor:
    x, y = points
    return (x >= 0) & (x <= width - 1) & (y >= 0) & (y <= height - 1)


def sensor_noise(shown: Tensor, flow: Tensor) -> Tensor:
    """(B, 1, 1, 1): the standard deviation of one frame's noise in the real pair ``shown`` (B, 6, H, W), read off its
    residual under ``flow`` (``pair_noise``, as the still gate reads it)."""
    prev, cur = shown[:, :3], shown[:, 3:6]
    unwarped = (prev - cur).abs().mean(1, keepdim=True)
    warped = warp_residual(prev, cur, flow)
    return pair_noise(unwarped, warped, flow, noise_correlation(prev, cur)) / NOISE_RESIDUAL_PER_SIGMA


def light_change(shown: Tensor, flow: Tensor) -> Tensor:
    """(B, 1, H, 1): how much brighter each row of the real pair's second frame is than its first, the second warped
    back by ``flow`` (so motion does not count), over ``LIGHT_ROWS`` rows; a gain, clamped to [0.5, 2]. A broken
    first frame's rows (not finite) count as no change: the made pair is of the second frame alone."""
    prev = luma(shown[:, :3]).mean(-1, keepdim=True)
    back = luma(warp(shown[:, 3:6], flow)).mean(-1, keepdim=True)
    return over_light_rows(back / prev.clamp_min(1e-3))


def over_light_rows(gain: Tensor) -> Tensor:
    """(B, 1, H, 1): a gain per row as a change of light: its running mean over ``LIGHT_ROWS`` rows, clamped to
    [0.5, 2], a row that is not finite counted as no change."""
    r = LIGHT_ROWS // 2
    return F.avg_pool2d(F.pad(gain, [0, 0, r, r], mode="replicate"), (LIGHT_ROWS, 1), 1).clamp(0.5, 2.0).nan_to_num(1.0)


class StreamMotion:
    """How much the stream moves: ``camera``, its camera's motion as the net read it (px; where no reading is given, the
    typical pixel's, the median length of the flow shown), and ``movers``, its fast pixels' (the 90th
    percentile), each a running mean over pairs (``MOTION_WEIGHT``), 0-d tensors on the flow's device (no value read
    back to the host). Zero until a flow is seen.

    Why the camera as read: the flow shown is the still gate's, which at night stands the background still on most
    pairs (the camera's evidence is within the noise), so its median read a photograph's night stream as moving
    0.18-0.41 px where its typical pixel moved 0.87-1.02 px; made pairs that moved that little taught the net a
    stiller picture than it watched, and a night stream drifted past its frozen start (moon's, its last 100 pairs over
    four seeds 1.004-1.034 times; sized by the still gate's reading, 1.001-1.014:
    docs/notebook/2026-12-02-the-made-camera-sized-by-the-gates-reading.md)."""

    def __init__(self) -> None:
        self.camera: Tensor | None = None
        self.movers: Tensor | None = None

    def observe(self, flow: Tensor, camera: Tensor | None = None) -> None:
        """``flow`` (1, 2, H, W) as shown; ``camera`` (1, 2, 1, 1) the camera's motion as the net read it, if known."""
        speeds = flow_lengths(flow.detach().float()).flatten()
        # Order statistics (``models.order_statistics``), not ``torch.quantile``: 1.7 ms at 128x96 on a CPU.
        n = speeds.numel()
        fast = kth_smallest(speeds, round(0.9 * (n - 1)) + 1)
        if camera is None:
            typical = kth_smallest(speeds, (n + 1) // 2)
        else:  # the median is not needed: no selection over the picture's pixels
            typical = flow_lengths(camera.detach().float()).flatten()[0].to(fast)
        if self.camera is None or self.movers is None or self.camera.device != flow.device:
            self.camera, self.movers = typical, fast
        else:
            self.camera = torch.lerp(self.camera, typical, MOTION_WEIGHT)
            self.movers = torch.lerp(self.movers, fast, MOTION_WEIGHT)

    def sizes(self, like: Tensor) -> tuple[Tensor, Tensor]:
        """(camera, movers) on ``like``'s device, zeros before any flow was seen."""
        zero = like.new_zeros(())
        return (zero if self.camera is None else self.camera.to(like)), (zero if self.movers is None else
                                                                          self.movers.to(like))  # fmt: skip


@dataclass(frozen=True)
class _Draw:
    """One known motion, in units of the picture's shorter side and of the stream's motion (``StreamMotion``), so that
    it fits any learning size and any stream."""

    view_shift: tuple[float, float]
    view_turn: float
    shift: tuple[float, float]  # in the camera's motions
    turn: float  # where the camera shifts a pixel or more
    log_zoom: float
    mover_half: float  # a share of the shorter side
    mover_place: tuple[float, float]  # in [0, 1] of where it fits
    mover_texture: tuple[float, float]
    mover_motion: tuple[float, float]  # in the movers' motions


@dataclass
class _Slot:
    """A made pair kept to be served again, and how many pairs it served so far."""

    pair: KnownPair
    served: int = 1


class KnownMotion:
    """Makes, from each real pair, a pair of its second frame moved by a known motion (module docstring); random but
    reproducible from ``seed``. A made pair serves ``hold`` pairs, every ``every``-th one, as it was made: the first
    stage of a PARTIME pipeline of two pushes through its pair the gradient of the pair two steps before, which is then
    the very pair it is pushed through. Made afresh from the newer frame with the same motion and light, the picture
    under them had moved on and that stage's scalar priors barely learned (a flickering stream's Lucas-Kanade dampings
    stood still at D = 2 while they rose at D = 1); drawn afresh for every pair, a gradient of another motion taught it
    little (docs/models.md#learning-while-watching).

    ``unknown``: then that many pairs more, known nowhere (``KnownPair.known``): the last stage learns nothing from
    them, so the gradient it sends back is zero, and a stage before it pushes that zero, not the old pair's gradient,
    through the first servings of the pair made after (``every`` = 2 and ``unknown`` = D - 1 clears every stage of a
    PARTIME pipeline of D). Pushed through the new pair, the old one's gradient held D = 2 back: a flickering stream
    learned at D = 2 1.07-1.11 times D = 1's error over four seeds, 0.99-1.04 with one pair unknown
    (docs/notebook/2026-12-02-the-old-pairs-gradient-left-out.md)."""

    def __init__(self, seed: int = 0, hold: int = 1, every: int = 1, unknown: int = 0) -> None:
        self.generator = torch.Generator().manual_seed(seed)
        self.hold, self.every, self.unknown, self.made = hold, every, unknown, 0
        self.slots: dict[int, _Slot] = {}

    def _normal(self) -> float:
        return float(torch.randn((), generator=self.generator))

    def _uniform(self, low: float = 0.0, high: float = 1.0) -> float:
        return low + (high - low) * float(torch.rand((), generator=self.generator))

    def __call__(self, shown: Tensor, flow: Tensor, motion: StreamMotion, quality: int | None = None) -> KnownPair:
        """A made pair from ``shown`` (1, 6, H, W: the real pair, RGB in [0, 1]) and its flow as the net sees it
        (1, 2, H, W), moving as much as ``motion`` says the stream does, its frames through a block codec at
        ``quality`` if given (``models.block_codec``); or this slot's pair again, while it has served fewer than
        ``hold`` pairs, and known nowhere for ``unknown`` pairs more (where the size is the same)."""
        key = self.made % self.every
        self.made += 1
        slot = self.slots.get(key)
        if (
            slot is not None
            and slot.served < self.hold + self.unknown
            and slot.pair.pair.shape[-2:] == shown.shape[-2:]
        ):
            slot.served += 1
            if slot.served > self.hold:
                return KnownPair(slot.pair.pair, slot.pair.flow, torch.zeros_like(slot.pair.valid), known=False)
            return slot.pair
        made = self._make(shown, flow, motion)
        if quality is not None:
            frames = made.pair.view(2, 3, *made.pair.shape[-2:])
            made = KnownPair(round_trip(frames, quality).view_as(made.pair), made.flow, made.valid)
        self.slots[key] = _Slot(_servable(made))
        return made

    def _make(self, shown: Tensor, flow: Tensor, motion: StreamMotion) -> KnownPair:
        """A pair made afresh: a motion drawn, the stream's noise and light borrowed from ``shown`` now."""
        n, u = self._normal, self._uniform
        mover_motion = (n(), n())
        draw = _Draw((n() * VIEW_SHIFT, n() * VIEW_SHIFT), n() * VIEW_TURN, (n(), n()), n() * TURN, n() * ZOOM,
                     u(*MOVER_SIDE) / 2, (u(), u()), (u(), u()), mover_motion)  # fmt: skip
        picture = shown[:, 3:6]
        _, _, h, w = picture.shape
        device, dtype = picture.device, picture.dtype
        camera, movers = motion.sizes(picture)
        grid = pixel_grid(h, w, device, dtype)[0]
        centre = torch.tensor([(w - 1) / 2, (h - 1) / 2], dtype=dtype, device=device)
        view_shift = torch.tensor(draw.view_shift, dtype=dtype, device=device) * min(h, w)
        shift = torch.tensor(draw.shift, dtype=dtype, device=device) * camera
        turning = camera.clamp(max=1.0)  # a still camera neither turns nor zooms
        first = _similarity(torch.tensor(draw.view_turn), torch.tensor(1.0), view_shift, centre)
        second = _similarity(draw.view_turn + draw.turn * turning, torch.exp(draw.log_zoom * turning),
                             view_shift + shift, centre)  # fmt: skip
        source = _apply(first, grid)  # where each pixel of the first frame reads the picture
        # The pixel of the second frame that reads the same point: second⁻¹(source).
        lands = torch.linalg.solve(second[:, :2], (source - second[:, 2, None, None]).flatten(1)).view(2, h, w)
        a, b = sample_at(picture, source[None]), sample_at(picture, _apply(second, grid)[None])
        known_flow = lands - grid
        valid = _inside(source, h, w) & _inside(lands, h, w)
        a, b, known_flow, valid = _mover(draw, picture, grid, a, b, known_flow, valid, movers.clamp(min=MOVER_FLOOR))
        noise = sensor_noise(shown, flow)
        a = a + noise * torch.randn(a.shape, generator=self.generator).to(device, dtype)
        b = b + noise * torch.randn(b.shape, generator=self.generator).to(device, dtype)
        b = b * light_change(shown, flow)
        pair = torch.cat([a, b], 1).clamp(0.0, 1.0)
        return KnownPair(pair, known_flow[None], valid[None, None].to(dtype))


def _servable(made: KnownPair) -> KnownPair:
    """``made`` as it is kept to be served again: a broken frame's pixels (not finite) count as known nowhere and read
    0, so the pairs it serves after its own teach nothing there and spoil no step (its own step's loss is NaN: the
    learner restores its last good weights once). Tensor ops only: no value is read back to the host."""
    finite = torch.isfinite(made.pair).all(1, keepdim=True)
    return KnownPair(made.pair.nan_to_num(0.0), made.flow, made.valid * finite.to(made.valid.dtype))


def _mover(draw: _Draw, picture: Tensor, grid: Tensor, a: Tensor, b: Tensor, flow: Tensor, valid: Tensor,
           speed: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:  # fmt: skip
    """A square of the picture from elsewhere, put on both frames, moving by its own shift between them (``speed``:
    its standard deviation per axis, px)."""
    _, _, h, w = picture.shape
    device, dtype = picture.device, picture.dtype
    half = min(h, w) * draw.mover_half
    room = torch.tensor([w - 2 * half, h - 2 * half], dtype=dtype, device=device)
    place = half + room * torch.tensor(draw.mover_place, dtype=dtype, device=device)
    texture = half + room * torch.tensor(draw.mover_texture, dtype=dtype, device=device)
    motion = torch.tensor(draw.mover_motion, dtype=dtype, device=device) * speed
    offset = grid - place[:, None, None]
    in_first = (offset.abs() <= half).all(0)
    in_second = ((offset - motion[:, None, None]).abs() <= half).all(0)
    on_first = sample_at(picture, (offset + texture[:, None, None])[None])
    on_second = sample_at(picture, (offset - motion[:, None, None] + texture[:, None, None])[None])
    a, b = torch.where(in_first, on_first, a), torch.where(in_second, on_second, b)
    flow = torch.where(in_first, motion[:, None, None].expand(2, h, w), flow)
    return a, b, flow, valid | in_first


def known_flow_loss(output: Tensor, target: Tensor) -> Tensor:
    """Mean end-point error of ``output``'s last sample (B, 2, H, W: the made pair's flow) against the known flow
    ``target`` (1, 3, H, W: flow, where known; ``KnownPair.target``). Earlier samples (the shown pair) are not
    learned from."""
    flow, valid = target[:, :2], target[:, 2:3]
    error = flow_lengths(output[-1:] - flow)
    return (error * valid).sum() / valid.sum().clamp_min(1.0)
