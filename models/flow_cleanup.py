"""What a learned flow gets wrong on real footage, corrected by image evidence: unsure pixels, and the tests of
image evidence the still gate (``models.still_gate``) shares.

A parameter-light layer that works before any training (a handful of learned scales), so a net starting from
scratch and a pretrained one meeting footage unlike its training data both benefit.

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

from types import ModuleType

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .cpu_loops import numba_installed
from .flow_loss import warp
from .order_statistics import kth_smallest
from .padding import replicate_pad
from .window_products import LIBRARY, window_mix


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
    padded = replicate_pad(image, [dilation] * 4)
    return torch.cat(
        [(padded[..., dy : dy + h, dx : dx + w] - image).abs().mean(1, keepdim=True) for dy, dx in _offsets(dilation)],
        1,
    )


def similarity_reference(image: Tensor, edge: Tensor, dilation: int) -> Tensor:
    """(B, 9, H, W): each pixel's 3x3 neighbours at ``dilation`` weighted by e^(-edge · ``colour_differences``),
    normalised to sum to one: the fill's weights before any flow is read. In tensor ops: the reference of the devices'
    own kernels (``models.fill_numba``, ``models.fill_triton``), and what runs where ``edge`` learns."""
    similar = torch.exp(-edge * colour_differences(image, dilation))
    return similar / similar.sum(1, keepdim=True)


def _similarity(image: Tensor, edge: Tensor, dilation: int) -> Tensor:
    """``similarity_reference`` in the device's own kernels where they take the tensors (a custom op while Dynamo
    traces: ``fill_similarity_op``)."""
    if torch.compiler.is_compiling() and not _wants_grad(image, edge):
        return fill_similarity_op(image, edge, dilation)
    return _similarity_eager(image, edge, dilation)


def _similarity_eager(image: Tensor, edge: Tensor, dilation: int) -> Tensor:
    """The device's kernels, else the tensor ops: what an eager fill and the custom op run."""
    if (kernels := _kernels(image, edge)) is not None:
        return kernels.similarity(image, edge, dilation)
    return similarity_reference(image, edge, dilation)


def _wants_grad(*tensors: Tensor) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def _kernels(*tensors: Tensor) -> ModuleType | None:
    """The fill's weights as the device's own kernels, where they take these tensors: a GPU's Triton kernels
    (``models.fill_triton``), the CPU's loops compiled by Numba (``models.fill_numba``). None: the tensor ops, also
    where a gradient is asked of the weights (the colour scale learning: neither device's kernels take one)."""
    if _wants_grad(*tensors):
        return None
    if tensors[0].is_cuda:
        from . import fill_triton as kernels  # imported on a GPU only: Triton comes with torch's CUDA wheels
    elif numba_installed():
        from . import fill_numba as kernels
    else:
        return None
    return kernels if kernels.fits(*tensors) else None


def neighbour_sum(t: Tensor, kernel: Tensor, dilation: int) -> Tensor:
    """Each pixel of ``t`` (B, C, H, W) replaced by the sum of its 3x3 neighbours at ``dilation`` (edges replicated)
    weighted by ``kernel`` (B, 9, H, W, in ``_offsets``' order)."""
    return window_mix(kernel, replicate_pad(t, [dilation] * 4), _offsets(dilation))


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
    noise = pair_noise((prev - cur).abs().mean(1, keepdim=True), error, flow, noise_correlation(prev, cur))
    g2 = (gradient_magnitude(prev) - noise).clamp_min(0) ** 2
    return g2 / (g2 + texture**2) * torch.exp(-error / residual)


def _max_filter(t: Tensor, size: int) -> Tensor:
    """Maximum over ``size`` x ``size`` pixels, edges replicated, along rows then columns: the same result at 2 x size
    reads a pixel instead of size squared (a 9 px max in a single pooling cost 1 ms at 128x96 on CPU; exploratory)."""
    half = size // 2
    rows = F.max_pool2d(replicate_pad(t, [half, half, 0, 0]), (1, size), 1)
    return F.max_pool2d(replicate_pad(rows, [0, 0, half, half]), (size, 1), 1)


def box_mean(t: Tensor, window: int) -> Tensor:
    """Local mean over ``window`` x ``window`` pixels, edges replicated: running sums (an integral image) along rows,
    then along columns, whatever the window. On CPU ``F.avg_pool2d`` cost 0.2-0.6 ms per 1-channel map at 128x96 (5-
    to 31-px windows) and 1.8 ms for the nine maps of a 5 px window, the running sums 0.07-0.09 and 0.43
    (exploratory). A running sum's rounding grows with its length, and a row or a column is short: a window's sum
    keeps float32's precision relative to its row's total."""
    half = window // 2
    rows = replicate_pad(t, [half + 1, half, 0, 0]).cumsum(-1)
    rows = rows[..., window:] - rows[..., :-window]
    sums = replicate_pad(rows, [0, 0, half + 1, half]).cumsum(-2)
    return (sums[..., window:, :] - sums[..., :-window, :]) / (window * window)


def close_gaps(t: Tensor, size: int) -> Tensor:
    """Morphological closing (a max over ``size`` x ``size``, then a min): gaps narrower than ``size`` fill in, wider
    ones and the outline stay as they were."""
    return -_max_filter(-_max_filter(t, size), size)


def central_differences(image: Tensor) -> tuple[Tensor, Tensor]:
    """(I(x + 1) - I(x - 1)) / 2 along x and along y, edges replicated: the image's gradient as the Lucas-Kanade steps,
    the texture tests and the variational refinement read it."""
    p = replicate_pad(image, [1, 1, 1, 1])
    return 0.5 * (p[..., 1:-1, 2:] - p[..., 1:-1, :-2]), 0.5 * (p[..., 2:, 1:-1] - p[..., :-2, 1:-1])


def gradient_magnitude(image: Tensor) -> Tensor:
    """(B, 1, H, W) the absolute central differences along x and y summed, averaged over the channels."""
    ix, iy = central_differences(image)
    return (ix.abs() + iy.abs()).mean(1, keepdim=True)


#: The long side the nets' layers were made and pretrained for (``models.pretrain``'s clips are 160x120).
MADE_FOR_SIDE = 160


def scene_scale(height: int, width: int) -> float:
    """How many times larger than ``MADE_FOR_SIDE`` a picture is, at least 1: what a width in pixels chosen at 160
    becomes to stay as wide in the scene (the camera shake the still gate follows); at 160 and below it stays."""
    return max(height, width, MADE_FOR_SIDE) / MADE_FOR_SIDE


#: The share of a pair's pixels at or below which ``noise_floor`` reads their residual: the lowest tenth. A codec's
#: residual is peaked at zero: read at its quartile, its noise came out higher than a Gaussian's with the same lowest
#: tenth, and the still gate put that much more back into every moving hypothesis (hand-held clips' error over all
#: pixels 1-12 % higher than at the tenth; docs/notebook/2026-11-30-the-still-gate-reads-a-codecs-noise.md).
NOISE_QUANTILE = 0.1

#: A residual's mean over its value at ``NOISE_QUANTILE``, for the mean absolute difference of two frames of Gaussian
#: noise over three channels (2.08-2.26 at 2-8 levels of 8 bits, rounded to them).
NOISE_MEAN_PER_QUANTILE = 2.2

#: Where ``noise_correlation`` reads a pair's noise: the share of the picture whose windows of this many pixels differ
#: least.
QUIET_SHARE, QUIET_WINDOW = 0.25, 15


def noise_floor(residual: Tensor) -> Tensor:
    """(B, 1, H, W) -> (B, 1, 1, 1): the mean residual a pair's noise alone leaves, read off the lowest tenth of
    ``residual`` (its best explanation per pixel, ``NOISE_QUANTILE``): exact where all of the picture is explained
    (stands still or is matched), about a seventh over where a fifth is not (occlusions, failed matches: the
    noise's 12.5th percentile is read for its 10th). No host sync (the GPU's captured step)."""
    flat = residual.detach().flatten(1)
    k = max(1, round(NOISE_QUANTILE * flat.shape[1]))
    return NOISE_MEAN_PER_QUANTILE * kth_smallest(flat, k, 1).view(-1, 1, 1, 1)


def noise_correlation(prev: Tensor, cur: Tensor) -> Tensor:
    """(B, 3, H, W) x 2 -> (B, 1, 1, 1) in [0, 1]: how alike a pair's noise is in neighbouring pixels (rho, the
    correlation of one pixel's with its neighbour's along a row or a column), read off the pair's difference where it
    is quietest (the quarter of the picture whose 15 px windows differ least: no motion or edge there, noise alone).
    Products of neighbours, not a ratio of quantiles: 8-bit steps make a low quantile jump by half from one pair to
    the next. Independent noise reads 0 (a pixel's sign is its own, whatever the window's size); a codec's, or a
    scaled frame's, is alike in neighbours (still cameras' real pairs: 0.85-1.00 of their residual left by a
    half-pixel warp, where independent noise leaves 0.71; docs/notebook/2026-11-30-the-still-gate-at-night.md)."""
    difference = (prev - cur).mean(1, keepdim=True)
    busy = box_mean(difference.abs(), QUIET_WINDOW)
    flat = busy.flatten(1)
    level = kth_smallest(flat, max(1, round(QUIET_SHARE * flat.shape[1])), 1).view(-1, 1, 1, 1)
    quiet = (busy <= level).to(difference.dtype)
    products, squares = difference.new_zeros(difference.shape[0]), difference.new_zeros(difference.shape[0])
    for pixel, neighbour, both_quiet in (
        (difference[..., 1:], difference[..., :-1], quiet[..., 1:] * quiet[..., :-1]),  # along the rows
        (difference[..., 1:, :], difference[..., :-1, :], quiet[..., 1:, :] * quiet[..., :-1, :]),  # the columns
    ):
        products = products + (both_quiet * pixel * neighbour).sum((1, 2, 3))
        squares = squares + (both_quiet * (pixel**2 + neighbour**2)).sum((1, 2, 3)) / 2
    return (products / squares.clamp_min(1e-12)).clamp(0, 1).view(-1, 1, 1, 1)


def noise_kept(flow: Tensor, correlation: Tensor) -> Tensor:
    """(B, 2, H, W) -> (B, 1, H, W): the share of two frames' noise residual left when the second is warped by
    ``flow``: at a fractional shift a along a row, bilinear interpolation keeps (1-a)^2 + a^2 + 2a(1-a)rho of its
    noise's variance (rho: ``correlation``, ``noise_correlation``), and as much again along a column, so a half-pixel
    warp of independent noise leaves sqrt(5/8) of the residual, a whole-pixel one all of it, and noise alike in
    neighbours keeps more (checked on frames of Gaussian noise: tests/test_flow_cleanup.py)."""
    frac = flow - flow.floor()
    variance = (1 - 2 * frac * (1 - frac) * (1 - correlation)).prod(1, keepdim=True)
    return ((1 + variance) / 2).sqrt()


def pair_noise(unwarped: Tensor, warped: Tensor, flow: Tensor, correlation: Tensor) -> Tensor:
    """(B, 1, 1, 1): a pair's ``noise_floor``, read where it stands still (``unwarped``, its residual as it came) or
    where ``flow`` matches it (``warped``, with the noise the warp averaged away counted back, ``noise_kept``),
    whichever reads less: motion inflates the one, failed matches the other. Its noise's own gradient (|ix| + |iy| of
    the frame) averages the same, so this much gradient is no texture."""
    return torch.minimum(noise_floor(unwarped), noise_floor(warped / noise_kept(flow, correlation)))


def with_noise_restored(residual: Tensor, flow: Tensor, noise: Tensor, correlation: Tensor) -> Tensor:
    """(B, 1, H, W): the residual a warp by ``flow`` left, with the part of the ``noise`` residual its interpolation
    averaged away put back (``noise_kept``)."""
    return residual + noise * (1 - noise_kept(flow, correlation))


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
    padded = replicate_pad(t, [reach] * 4)
    return torch.stack([padded[..., reach + dy : reach + dy + h, reach + dx : reach + dx + w] for dx, dy in offsets], 1)


def neighbour_flows(flow: Tensor, dilation: int) -> Tensor:
    """(B, 9, 2, H, W): each pixel's 3x3 neighbours' flows at ``dilation`` (edges replicated, ``_offsets``' order)."""
    return neighbours(flow, [(dx - dilation, dy - dilation) for dy, dx in _offsets(dilation)])


def explains_window(dilation: int) -> int:
    """The window over which a neighbour's flow is judged (``explains_reference``): 5 px at dilation 4, 7 at 8. The
    farther a neighbour, the likelier it lies on another surface, and the more evidence its flow needs."""
    return 2 * dilation.bit_length() - 1


def explains_reference(prev: Tensor, cur: Tensor, flow: Tensor, dilation: int) -> Tensor:
    """(B, 9, H, W) in (0, 1]: how well each of a pixel's neighbours' ``flow`` at ``dilation`` explains the pixel's
    window (``explains_window``) of ``prev`` and ``cur`` (brightness, (B, 1, H, W)), against the best of them
    (``EXPLAINS_SCALE``). In tensor ops: the reference of the devices' own kernels (``models.fill_numba``,
    ``models.fill_triton``)."""
    errors = box_mean(candidate_errors(prev, cur, neighbour_flows(flow, dilation)), explains_window(dilation))
    return torch.exp((errors.amin(1, keepdim=True) - errors) / EXPLAINS_SCALE)


def _explains(prev: Tensor, cur: Tensor, flow: Tensor, dilation: int) -> Tensor:
    """``explains_reference`` in the device's own kernels where they take the tensors (a custom op while Dynamo
    traces: ``fill_explains_op``)."""
    if torch.compiler.is_compiling() and not _wants_grad(prev, cur, flow):
        return fill_explains_op(prev, cur, flow, dilation)
    return _explains_eager(prev, cur, flow, dilation)


def _explains_eager(prev: Tensor, cur: Tensor, flow: Tensor, dilation: int) -> Tensor:
    """The device's kernels, else the tensor ops: what an eager fill and the custom op run."""
    if (kernels := _kernels(prev, cur, flow)) is not None:
        return kernels.explains(prev, cur, flow, dilation, explains_window(dilation), EXPLAINS_SCALE)
    return explains_reference(prev, cur, flow, dilation)


# The fill's weights as ``torch.library`` custom ops, for ``torch.compile``: Dynamo cannot trace into the kernels, and
# a compiled step must compute what the eager one does (the compiled twin takes over a stream's learning:
# ``server.stream.learner.compiled_twin``), so a compiled fill calls the same kernels as one node each, its fake kernel
# giving the shape. Neither takes a gradient (where the colour scale learns, the tensor ops are traced).
@torch.library.custom_op(f"{LIBRARY}::fill_similarity", mutates_args=())
def fill_similarity_op(image: Tensor, edge: Tensor, dilation: int) -> Tensor:
    """``_similarity``, as one node of a compiled graph."""
    return _similarity_eager(image, edge, dilation).contiguous()


@fill_similarity_op.register_fake
def _fill_similarity_shape(image: Tensor, edge: Tensor, dilation: int) -> Tensor:
    return image.new_empty(image.shape[0], 9, *image.shape[-2:])


@torch.library.custom_op(f"{LIBRARY}::fill_explains", mutates_args=())
def fill_explains_op(prev: Tensor, cur: Tensor, flow: Tensor, dilation: int) -> Tensor:
    """``_explains``, as one node of a compiled graph."""
    return _explains_eager(prev, cur, flow, dilation).contiguous()


@fill_explains_op.register_fake
def _fill_explains_shape(prev: Tensor, cur: Tensor, flow: Tensor, dilation: int) -> Tensor:
    return prev.new_empty(prev.shape[0], 9, *prev.shape[-2:])


class EdgeAwareFill(nn.Module):
    """[flow, frames, ...] -> the same tensor with the flow filled in where it is unsure (module docstring).

    ``verified``: dilations at which a neighbour's flow fills a pixel only as far as it explains that pixel's window
    about as well as the best of the nine (``explains_reference``, on brightness): a colour alone does not tell a
    swaying branch from the still leaves around it, whose confident zeros then took half its motion
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
                kernel = _similarity(prev, edge, d)
                if d in self.verified:  # decided on the fill so far, without differentiating it
                    kernel = kernel * _explains(*brightness, (weighted / weight.clamp_min(1e-6)).detach(), d)
                weight = neighbour_sum(weight, kernel, d)
            weighted = neighbour_sum(weighted, kernel, d)
            if i >= len(self.dilations) - 1:  # the near reach's fill and each farther one's
                fills.append((weighted / weight.clamp_min(1e-6), weight))
        filled = fills[-1][0]
        for fill, support in reversed(fills[:-1]):  # from the farthest reach in: a nearer one with support wins
            nearer = support / (support + FAR_SUPPORT)
            filled = nearer * fill + (1 - nearer) * filled
        return torch.cat([sure * flow + (1 - sure) * filled, x[:, 2:]], 1)
