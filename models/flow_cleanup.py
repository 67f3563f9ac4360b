"""What a learned flow gets wrong on real footage, corrected by image evidence: still pixels, and unsure ones.

Two parameter-light layers that work before any training (a handful of learned scales each), so a net starting
from scratch and a pretrained one meeting footage unlike its training data both benefit.

``StillGate``: most of a real camera's picture does not move, and a net's small errors there cost more than the
motion it gets right (a static street camera is nearly all background). Where standing still explains the pair
as well as the estimated flow does (the local photometric error of zero flow is no larger than that of the
flow: the stationary-pixel test of Monodepth2's auto-masking), the flow is gated to zero. Stillness needs evidence
as motion does: inside a flat region (a hand's palm, a wall) any flow explains a small window as well as standing
still, so where the pixel's own window has little texture the test is taken over a wide window instead, which
reaches the region's edges: a palm that moved 17 px kept its motion (it lost a quarter of it to a gate deciding
on its own window alone), a still wall stays still. And only where the frames barely changed: a window whose
frames differ clearly is not still, whatever zero flow explains (a fast mover's imperfect flow often explains it
no better). A mover has no still holes: where the test gates specks inside one (a patch of its texture matched as
well by standing still), the gaps narrower than 9 px close again; a still background is wider than that. The
service's net takes "standing still" as moving with the camera (``follows_camera``): a shaking camera's flat ceiling
shares its motion, which no match inside it can show, and so does a panning camera's flat wall where nothing textured
stands still. Both explanations are judged at the same noise: a warp's bilinear interpolation averages the current
frame's noise, so on a noisy camera's still background the net's sub-pixel fit of the noise explained the pair
better than standing still; the gate puts the averaged noise back (``with_noise_restored``, the pair's noise read
off its best-explained quarter: ``pair_noise``) and, as the fill does, counts as texture only what rises above the
noise.

``EdgeAwareFill``: a cost volume has nothing to say where the image has no texture (a white table, the sky, a wall)
or where the match fails (occlusions, noise, compression): there a learned net answers with noise. Classical methods
fill these regions in from their surroundings (variational smoothing in DIS, edge-preserving interpolation in
EpicFlow); this layer does it by normalised convolution (Knutsson & Westin): each pixel's confidence is high where
the image has texture and the current frame, warped back by the flow, matches the previous one; a cascade of 3x3
averages with growing dilation, weighted by confidence and by colour similarity in the previous frame (so flow does
not leak across object edges), spreads the confident flow into the unsure pixels, which take it; confident pixels
keep their own. Colour, over all three channels: guided by brightness alone, the fill let flow cross edges between
equally bright colours (shipped net, frozen, box's moving pixels over the whole clip 1.08 times the better classical
method's error, 1.06 by colour; tree's first 30 pairs 1.45 and 1.44; exploratory). At the widest dilations colour is
not enough (a swaying branch before still leaves of the same green): there a neighbour's flow counts only as far as
it explains the pixel's window about as well as the best of its nine neighbours' flows does (``verified``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .camera_motion import FIT_RADII_PX, REACH_PX, camera_motion, similarity_motion
from .flow_loss import in_frame_mask, warp
from .window_products import window_mix


def frames_of(x: Tensor) -> Tensor:
    """The frame pair (B, 6, H, W) of the tensor a flow net's layers pass along, ``[flow (2), frames (6), ...]``.

    Detached: the frames are the input and nothing learned flows into them, yet read as a slice of a tensor that
    needs a gradient (for the flow) every read would cost a backward (a zero-filled copy of the whole tensor per
    read, the pooling's backward) whose result is thrown away at the first layer."""
    return x[:, 2:8].detach()


def _offsets(dilation: int) -> tuple[tuple[int, int], ...]:
    """Where each pixel's 3x3 neighbours at ``dilation`` sit in the image padded by ``dilation``: (row, column)
    offsets of the nine windows, row by row."""
    return tuple((dy, dx) for dy in (0, dilation, 2 * dilation) for dx in (0, dilation, 2 * dilation))


def colour_differences(image: Tensor, dilation: int) -> Tensor:
    """(B, 9, H, W) how far each of a pixel's 3x3 neighbours at ``dilation`` is from it in colour: the mean absolute
    difference over the channels of ``image`` (edges replicated). Colour, not brightness: a purple object before
    green leaves, or two flat colours of a cartoon, may be equally bright."""
    h, w = image.shape[-2:]
    padded = F.pad(image, [dilation] * 4, mode="replicate")
    return torch.cat(
        [(padded[..., dy : dy + h, dx : dx + w] - image).abs().mean(1, keepdim=True) for dy, dx in _offsets(dilation)],
        1,
    )


def neighbour_sum(t: Tensor, kernel: Tensor, dilation: int) -> Tensor:
    """Each pixel of ``t`` (B, C, H, W) replaced by the sum of its 3x3 neighbours at ``dilation`` (edges replicated)
    weighted by ``kernel`` (B, 9, H, W, in ``_offsets``' order)."""
    return window_mix(kernel, F.pad(t, [dilation] * 4, mode="replicate"), _offsets(dilation))


def warp_residual(prev: Tensor, cur: Tensor, flow: Tensor) -> Tensor:
    """(B, 1, H, W): how badly ``flow`` explains each pixel, the mean absolute difference over the channels between
    ``prev`` and ``cur`` warped back by it (``candidate_errors`` for K flows at once)."""
    return (prev - warp(cur, flow)).abs().mean(1, keepdim=True)


def confidence(flow: Tensor, prev: Tensor, cur: Tensor, texture: Tensor, residual: Tensor) -> Tensor:
    """(B, 1, H, W) in [0, 1]: textured (gradient above the pair's noise ≫ ``texture``: a noisy flat wall is not
    textured, and its noise-fitted flow is filled) and well matched (error ≪ ``residual``). Like the still gate's
    decision, it reads the flow without differentiating it (a steep weight's gradient would swamp the loss's own)."""
    flow = flow.detach()
    error = warp_residual(prev, cur, flow)
    noise = pair_noise((prev - cur).abs().mean(1, keepdim=True), error, flow)
    g2 = (_gradient(prev) - noise).clamp_min(0) ** 2
    return g2 / (g2 + texture**2) * torch.exp(-error / residual)


def _max_filter(t: Tensor, size: int) -> Tensor:
    """Maximum over ``size`` x ``size`` pixels, edges replicated, along rows then columns: the same result at 2 x size
    reads a pixel instead of size squared (a 9 px max in a single pooling cost 1 ms at 128x96 on CPU; exploratory)."""
    half = size // 2
    rows = F.max_pool2d(F.pad(t, [half, half, 0, 0], mode="replicate"), (1, size), 1)
    return F.max_pool2d(F.pad(rows, [0, 0, half, half], mode="replicate"), (size, 1), 1)


def box_mean(t: Tensor, window: int) -> Tensor:
    """Local mean over ``window`` x ``window`` pixels, edges replicated: running sums (an integral image) along rows,
    then along columns, whatever the window. On CPU ``F.avg_pool2d`` cost 0.2-0.6 ms per 1-channel map at 128x96 (5-
    to 31-px windows) and 1.8 ms for the nine maps of a 5 px window, the running sums 0.07-0.09 and 0.43
    (exploratory). A running sum's rounding grows with its length, and a row or a column is short: a window's sum
    keeps float32's precision relative to its row's total."""
    half = window // 2
    rows = F.pad(t, [half + 1, half, 0, 0], mode="replicate").cumsum(-1)
    rows = rows[..., window:] - rows[..., :-window]
    sums = F.pad(rows, [0, 0, half + 1, half], mode="replicate").cumsum(-2)
    return (sums[..., window:, :] - sums[..., :-window, :]) / (window * window)


def close_gaps(t: Tensor, size: int) -> Tensor:
    """Morphological closing (a max over ``size`` x ``size``, then a min): gaps narrower than ``size`` fill in, wider
    ones and the outline stay as they were."""
    return -_max_filter(-_max_filter(t, size), size)


def central_differences(image: Tensor) -> tuple[Tensor, Tensor]:
    """(I(x + 1) - I(x - 1)) / 2 along x and along y, edges replicated: the image's gradient as the Lucas-Kanade steps,
    the texture tests and the variational refinement read it."""
    p = F.pad(image, [1, 1, 1, 1], mode="replicate")
    return 0.5 * (p[..., 1:-1, 2:] - p[..., 1:-1, :-2]), 0.5 * (p[..., 2:, 1:-1] - p[..., :-2, 1:-1])


def _gradient(image: Tensor) -> Tensor:
    """(B, 1, H, W) the absolute central differences along x and y summed, averaged over the channels."""
    ix, iy = central_differences(image)
    return (ix.abs() + iy.abs()).mean(1, keepdim=True)


#: A mean gradient of this much over a window (in intensity per pixel) makes its still test half-sure: the fill's
#: texture scale as it starts (``EdgeAwareFill.log_texture``).
STILL_TEXTURE = 0.02


#: The long side the nets' layers were made and pretrained for (``models.pretrain``'s clips are 160x120).
MADE_FOR_SIDE = 160


def scene_scale(height: int, width: int) -> float:
    """How many times larger than ``MADE_FOR_SIDE`` a picture is, at least 1: what a width in pixels chosen at 160
    becomes to stay as wide in the scene (the camera shake the still gate follows); at 160 and below it stays."""
    return max(height, width, MADE_FOR_SIDE) / MADE_FOR_SIDE


#: The share of a pair's pixels at or below which ``noise_floor`` reads their residual.
NOISE_QUANTILE = 0.25

#: A residual's mean over its lower quartile's value, for the mean absolute difference of two frames of Gaussian
#: noise over three channels (1.47; 1.35-1.51 at 2-8 levels of 8 bits, rounded to them).
NOISE_MEAN_PER_QUARTILE = 1.5


def noise_floor(residual: Tensor) -> Tensor:
    """(B, 1, H, W) -> (B, 1, 1, 1): the mean residual a pair's noise alone leaves, read off the lower quartile of
    ``residual`` (its best explanation per pixel): exact where all of the picture is explained (stands still or is
    matched), a tenth over where a fifth is not (occlusions, failed matches: the noise's 31st percentile is read for
    its 25th), two fifths over where half is not. No host sync (the GPU's captured step)."""
    flat = residual.detach().flatten(1)
    k = max(1, round(NOISE_QUANTILE * flat.shape[1]))
    return NOISE_MEAN_PER_QUARTILE * flat.kthvalue(k, dim=1).values.view(-1, 1, 1, 1)


def noise_kept(flow: Tensor) -> Tensor:
    """(B, 2, H, W) -> (B, 1, H, W): the share of two frames' noise residual left when the second is warped by
    ``flow``: at a fractional shift (a, b) bilinear interpolation keeps ((1-a)^2 + a^2)((1-b)^2 + b^2) of its
    noise's variance, so a half-pixel warp leaves sqrt(5/8) of the residual, a whole-pixel one all of it (checked on
    frames of Gaussian noise: tests/test_flow_cleanup.py)."""
    frac = flow - flow.floor()
    variance = ((1 - frac) ** 2 + frac**2).prod(1, keepdim=True)
    return ((1 + variance) / 2).sqrt()


def pair_noise(unwarped: Tensor, warped: Tensor, flow: Tensor) -> Tensor:
    """(B, 1, 1, 1): a pair's ``noise_floor``, read where it stands still (``unwarped``, its residual as it came) or
    where ``flow`` matches it (``warped``, with the noise the warp averaged away counted back), whichever reads less:
    motion inflates the one, failed matches the other. Its noise's own gradient (|ix| + |iy| of the frame) averages
    the same, so this much gradient is no texture."""
    return torch.minimum(noise_floor(unwarped), noise_floor(warped / noise_kept(flow)))


def with_noise_restored(residual: Tensor, flow: Tensor, noise: Tensor) -> Tensor:
    """(B, 1, H, W): the residual a warp by ``flow`` left, with the part of the ``noise`` residual its interpolation
    averaged away put back (``noise_kept``)."""
    return residual + noise * (1 - noise_kept(flow))


#: The largest camera motion the still gate follows whatever else the picture shows, in px a frame at
#: ``MADE_FOR_SIDE`` and below (as much in the scene at larger sizes): a shake. Larger, a common motion may be a
#: mover filling most of the picture, and following it painted the wall behind one with its motion; the gate then
#: follows it only where nothing textured stands still (``STANDING_SHARE``;
#: docs/models.md#the-still-gate-follows-the-camera).
CAMERA_SHAKE_PX = 1.0

#: The share of the picture's texture (``StillGate``'s ``sure``, where the camera's warp lands in the frame) that must
#: stand still for the gate to take a motion larger than a shake for a mover's, not the camera's: standing still
#: explains it (its residual over the gate's window within ``STANDING_MARGIN`` noise floors) and explains it better
#: than the camera's motion by as much. A door frame on the wall behind a person filling half a webcam's picture
#: holds 0.5-30 % of it; a pan of real frames at most 1 %, and real movers in it, which standing still does not
#: explain either, none (exploratory, docs/models.md#a-pan-is-the-cameras-where-nothing-textured-stands-still).
STANDING_SHARE = 0.02
STANDING_MARGIN = 2.0

#: In a pan the gate follows, by how many noise floors a pixel's own flow must explain its window better than the
#: camera's motion to be kept: within a floor it is the camera's estimate with the noise of a window's fit (blurred
#: pans of 10 px: 0.51 px of error with the flow kept wherever it explained the window at all better, 0.29 with one
#: floor; movers of real texture in such pans within 0.03 px of their error either way; exploratory,
#: docs/models.md#a-pan-is-the-cameras-where-nothing-textured-stands-still).
PAN_EVIDENCE = 1.0

#: By how much of the noise residual (``noise_floor``) the camera's warp must explain the whole picture better than
#: standing still: on a static camera's noisy frames the flow's most common value is a few tenths of a pixel of
#: noise, which with its noise restored explains the picture about as well as standing still (box with noise of 8
#: levels: within 0.7 % of the noise residual, the camera taken in a quarter of the pairs without this evidence).
CAMERA_EVIDENCE = 0.02


def _explains_better(residual: Tensor, than: Tensor, noise: Tensor) -> Tensor:
    """(B, 1, 1, 1): whether the warp that left ``residual`` explains the whole picture better than the one that left
    ``than``, by more than ``CAMERA_EVIDENCE`` of the ``noise`` residual."""
    return than.mean((2, 3), keepdim=True) - residual.mean((2, 3), keepdim=True) > CAMERA_EVIDENCE * noise


class StillGate(nn.Module):
    """[flow, frames, ...] -> the same tensor with the flow gated to zero where zero flow explains the pair as well;
    decided over ``window`` where that window has texture, else over ``wide`` (module docstring), and only where the
    frames barely changed over the ``changed`` window; gaps in the kept flow narrower than ``closing`` are closed.

    ``follows_camera``: the background's motion is the camera's (``models.camera_motion``), not zero: the gate then
    tests and gates to that motion, so before a shaking or panning camera a flat wall moves with it (zero before a
    static one, as without; docs/models.md#the-still-gate-follows-the-camera and the section after it).

    ``hands_on_keep``: the tensor goes on with the gate's decision appended, (B, 1, H, W) in [0, 1], 1 where the flow
    was kept: a variational refinement after it does not smooth across that boundary (``models.variational``)."""

    def __init__(
        self,
        window: int = 5,
        wide: int = 31,
        changed: int = 15,
        closing: int = 9,
        follows_camera: bool = False,
        hands_on_keep: bool = False,
    ) -> None:
        super().__init__()
        self.window, self.windows, self.changed, self.closing = window, (window, wide), changed, closing
        self.follows_camera, self.hands_on_keep = follows_camera, hands_on_keep
        # In hundredths of an intensity: an Adam step moves a parameter by about the learning rate whatever its size,
        # which for a margin of 0.001 in intensity units would be a leap. It may turn negative (gate less).
        self.margin = nn.Parameter(torch.tensor(0.1))  # how much better moving must be
        # Width of the gate's transition: about 8-bit video's quantisation step (1/255) averaged over the window's
        # 25 pixels. A width of 0.002 let 27 % of the flow through where moving explained the pair no better than
        # standing still (sigmoid(-margin/width) at no gain), which painted the static background on real clips.
        self.log_softness = nn.Parameter(torch.tensor(0.0005).log())
        # In hundredths too: a ``changed`` window whose frames differ by more than this on average is not still, however
        # well standing still explains it. A fast mover's imperfect flow often explains its pixels no better than zero
        # does; gated, a hand lost part of its motion (tree's fast pixels: EPE 4.7 before the gate, 5.3 after it;
        # docs/models.md#the-still-gate-leaves-changed-places-alone).
        self.quiet = nn.Parameter(torch.tensor(5.0))

    def forward(self, x: Tensor) -> Tensor:
        flow, (prev, cur) = x[:, :2], frames_of(x).split(3, 1)
        # The decision reads the flow without differentiating it: the gate's steep edge would send the flow
        # gradients hundreds of times the loss's own (learning from scratch diverged).
        flow_read = flow.detach()
        unwarped = (prev - cur).abs().mean(1, keepdim=True)
        warped = warp_residual(prev, cur, flow_read)
        # A warp interpolates the current frame, which averages its noise away: on a still, noisy window any
        # sub-pixel flow explained the pair better than standing still did (box with noise of 4 levels: its still
        # background painted; docs/models.md#the-still-gate-judges-at-the-same-noise). Every hypothesis is judged
        # with its full noise, and only the gradient above the noise's own is texture.
        noise = pair_noise(unwarped, warped, flow_read)
        moved = with_noise_restored(warped, flow_read, noise)
        texture = (box_mean(_gradient(prev), self.window) - noise).clamp_min(0) ** 2
        sure = texture / (texture + STILL_TEXTURE**2)
        camera, still = self._background(flow_read, prev, cur, unwarped, noise, sure)
        margin, softness = self.margin / 100, self.log_softness.exp()
        near, far = (torch.sigmoid((box_mean(still, w) - box_mean(moved, w) - margin) / softness) for w in self.windows)
        quiet = torch.sigmoid((self.quiet / 100 - box_mean(still, self.changed)) / softness)
        keep = close_gaps(1 - quiet * (1 - sure * near - (1 - sure) * far), self.closing)
        gated = flow * keep if camera is None else camera + (flow - camera) * keep
        return torch.cat([gated, x[:, 2:], *([keep.detach()] if self.hands_on_keep else [])], 1)

    def _background(
        self, flow: Tensor, prev: Tensor, cur: Tensor, unwarped: Tensor, noise: Tensor, sure: Tensor
    ) -> tuple[Tensor | None, Tensor]:
        """What standing still means, and how much the frames differ under it per pixel: zero (``unwarped``), or
        (``follows_camera``) the camera's motion where the frames confirm it, warped back by it differing less over
        the whole picture than as they came, at the same noise and by more than ``CAMERA_EVIDENCE``; and, larger
        than a shake (a pan), only where little of the texture ``sure`` stands still (``STANDING_SHARE``), as a
        similarity where that explains the picture better than the translation, and with its residual counted
        ``PAN_EVIDENCE`` noise floors under what it is (a pixel's own flow must beat it by that much). A flow's most
        common value is not evidence enough: a net learning from scratch starts with a bias of a few tenths of a
        pixel everywhere, and a static background gated to it was painted (box: all pixels over the first 30 pairs
        0.019 -> 0.067 px; docs/models.md#the-still-gate-follows-the-camera)."""
        if not self.follows_camera:
            return None, unwarped
        scale = scene_scale(*flow.shape[-2:])
        camera = camera_motion(flow, REACH_PX * scale).expand_as(flow)
        along = with_noise_restored(warp_residual(prev, cur, camera), camera, noise)
        confirmed = _explains_better(along, unwarped, noise)
        shake = camera[..., :1, :1].norm(dim=1, keepdim=True) <= CAMERA_SHAKE_PX * scale
        pan = ~shake & (self._standing_share(camera, along, unwarped, noise, sure) < STANDING_SHARE)
        # A hand-held pan turns and zooms a little too: a similarity, where it explains the picture better.
        radii = tuple(r * scale for r in FIT_RADII_PX)
        turned = similarity_motion(flow, camera[..., :1, :1], sure * in_frame_mask(camera), radii)
        turned_along = with_noise_restored(warp_residual(prev, cur, turned), turned, noise)
        turns = pan & _explains_better(turned_along, along, noise)
        camera, along = torch.where(turns, turned, camera), torch.where(turns, turned_along, along)
        follows = confirmed & (shake | pan)
        background = along - PAN_EVIDENCE * noise * (confirmed & pan)
        return camera * follows, torch.where(follows, background, unwarped)

    def _standing_share(self, camera: Tensor, along: Tensor, unwarped: Tensor, noise: Tensor, sure: Tensor) -> Tensor:
        """(B, 1, 1, 1): the share of the texture ``sure`` that standing still explains, and explains better than the
        ``camera``'s motion (``along``), by ``STANDING_MARGIN`` noise floors over the gate's window: a door frame
        behind a mover, not a pan, nor a mover in a pan. Counted only where the camera's warp lands in the frame;
        beyond, its residual is the padding's."""
        still = box_mean(unwarped, self.window)
        stands = (still < STANDING_MARGIN * noise) & (box_mean(along, self.window) > still + STANDING_MARGIN * noise)
        counted = sure * in_frame_mask(camera)
        return (counted * stands).mean((2, 3), keepdim=True) / counted.mean((2, 3), keepdim=True).clamp_min(1e-6)


#: The mean confidence over a reach at which it fills a pixel half and the farther reaches the other half
#: (``EdgeAwareFill``'s ``farther``): a tenth of the reach well matched and textured.
FAR_SUPPORT = 0.1


#: How much worse than the best of a pixel's nine neighbours at a verified dilation another neighbour's flow may
#: explain the pixel (mean absolute brightness error over the window) before its share in the fill falls by a factor
#: e (``EdgeAwareFill``'s ``verified``): about two 8-bit levels.
EXPLAINS_SCALE = 0.01


def candidate_errors(prev: Tensor, cur: Tensor, flows: Tensor) -> Tensor:
    """(B, K, H, W): how badly each of K candidate flows (B, K, 2, H, W) explains each pixel, the mean absolute
    difference over the channels between ``prev`` and ``cur`` warped back by that flow. All K warps in one."""
    b, k, _, h, w = flows.shape
    prev, cur = (t.unsqueeze(1).expand(-1, k, -1, -1, -1).flatten(0, 1) for t in (prev, cur))
    return (prev - warp(cur, flows.flatten(0, 1))).abs().mean(1).view(b, k, h, w)


def neighbours(t: Tensor, offsets: list[tuple[int, int]]) -> Tensor:
    """(B, K, C, H, W): for every pixel of ``t`` (B, C, H, W), the values of the pixels (dx, dy) away, edges
    replicated; one padding, the K windows are views of it."""
    h, w = t.shape[-2:]
    reach = max(max(abs(dx), abs(dy)) for dx, dy in offsets)
    padded = F.pad(t, [reach] * 4, mode="replicate")
    return torch.stack([padded[..., reach + dy : reach + dy + h, reach + dx : reach + dx + w] for dx, dy in offsets], 1)


def neighbour_flows(flow: Tensor, dilation: int) -> Tensor:
    """(B, 9, 2, H, W): each pixel's 3x3 neighbours' flows at ``dilation`` (edges replicated, ``_offsets``' order)."""
    return neighbours(flow, [(dx - dilation, dy - dilation) for dy, dx in _offsets(dilation)])


def explains(prev: Tensor, cur: Tensor, flow: Tensor, dilation: int) -> Tensor:
    """(B, 9, H, W) in (0, 1]: how well each of a pixel's neighbours' ``flow`` at ``dilation`` explains the pixel's
    window, against the best of them (``EXPLAINS_SCALE``). The window grows with the reach, 5 px at dilation 4 and 7
    at 8: the farther a neighbour, the likelier it lies on another surface, and the more evidence its flow needs."""
    window = 2 * dilation.bit_length() - 1
    errors = box_mean(candidate_errors(prev, cur, neighbour_flows(flow, dilation)), window)
    return torch.exp((errors.amin(1, keepdim=True) - errors) / EXPLAINS_SCALE)


class EdgeAwareFill(nn.Module):
    """[flow, frames, ...] -> the same tensor with the flow filled in where it is unsure (module docstring).

    ``verified``: dilations at which a neighbour's flow fills a pixel only as far as it explains that pixel's window
    about as well as the best of the nine (``explains``, on brightness): a colour alone does not tell a swaying
    branch from the still leaves around it, whose confident zeros then took half its motion
    (docs/models.md#a-neighbour-fills-a-pixel-only-with-a-flow-that-explains-it).

    ``farther``: dilations past ``dilations`` (whose cascade reaches 15 px) that fill a pixel as far as the nearer
    reach lacks confident support (its mean confidence against ``FAR_SUPPORT``): the middle of a flat region wider
    than the near reach, as a sky, otherwise falls to zero (no confident flow in reach). Only there: averaged over
    the far reach everywhere, a textured photo's unsure pixels took flow from too far away
    (docs/models.md#a-flat-sky-is-filled-from-further-away)."""

    def __init__(
        self, dilations: tuple[int, ...] = (1, 2, 4, 8), farther: tuple[int, ...] = (), verified: tuple[int, ...] = ()
    ) -> None:
        super().__init__()
        self.dilations, self.farther, self.verified = dilations, farther, verified
        self.log_edge = nn.Parameter(torch.tensor(2.3))  # colour difference scale: weights e^(-10 mean |ΔRGB|)
        self.log_texture = nn.Parameter(torch.tensor(-3.9))  # a gradient of ~0.02 is half-sure
        self.log_residual = nn.Parameter(torch.tensor(-3.0))  # a match error of ~0.05 costs a factor e
        # Whether the three scales learn. Offline (models.pretrain) they do; online they stay as shipped: the fill's
        # weights then need no gradient, and the flow's gradient through the fill costs a fraction of the forward.
        self.learn_scales = False

    def forward(self, x: Tensor) -> Tensor:
        flow, (prev, cur) = x[:, :2], frames_of(x).split(3, 1)
        dilations = self.dilations + self.farther
        learning = torch.is_grad_enabled() and self.learn_scales
        with torch.set_grad_enabled(learning):
            sure = confidence(flow, prev, cur, self.log_texture.exp(), self.log_residual.exp())
            edge = self.log_edge.exp()
        brightness = (prev.mean(1, keepdim=True), cur.mean(1, keepdim=True)) if self.verified else ()
        weighted, weight, fills = flow * sure, sure, []
        for i, d in enumerate(dilations):
            with torch.set_grad_enabled(learning):  # the nine neighbours' weights, normalised
                similar = torch.exp(-edge * colour_differences(prev, d))
                kernel = similar / similar.sum(1, keepdim=True)
                if d in self.verified:  # decided on the fill so far, without differentiating it
                    kernel = kernel * explains(*brightness, (weighted / weight.clamp_min(1e-6)).detach(), d)
                weight = neighbour_sum(weight, kernel, d)
            weighted = neighbour_sum(weighted, kernel, d)
            if i >= len(self.dilations) - 1:  # the near reach's fill and each farther one's
                fills.append((weighted / weight.clamp_min(1e-6), weight))
        filled = fills[-1][0]
        for fill, support in reversed(fills[:-1]):  # from the farthest reach in: a nearer one with support wins
            nearer = support / (support + FAR_SUPPORT)
            filled = nearer * fill + (1 - nearer) * filled
        return torch.cat([sure * flow + (1 - sure) * filled, x[:, 2:]], 1)
