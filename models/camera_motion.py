"""The camera's motion between two frames, read off a flow field: its most common value (a 2-D histogram's peak),
anywhere or near the whole picture's translation (``picture_translation``, read off the frames), and for a pan a
similarity or an affine map fitted around it (``similarity_motion``, ``affine_motion``).

Why: the still gate (``still_gate.StillGate``) falls back, where the pair gives no evidence of motion, to what
the background does. Before a static camera that is zero; before a shaking one it is the camera's motion, which a
flat wall or a car's ceiling shares though nothing in them can be matched. The most common flow is the background's
as long as the background is the largest surface that moves as one; a median of each component flipped to a mover's
motion where movers covered nearly half the picture (bikes), and an affine fit bent towards them. Whether the gate
follows a motion larger than a shake is the gate's to decide: two frames cannot tell a camera that moved from a mover
that fills most of the picture before a plain wall (docs/models.md#the-still-gate-follows-the-camera).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

#: The coarse histogram's bins, in px: where the most common flow lies, to about a pixel (``camera_motion``).
COARSE_BIN_PX = 1.0
#: The fine histogram's bins around the coarse peak: how precisely the camera's motion is known before the bin's mean
#: refines it.
BIN_PX = 0.1
#: The farthest motion read, in px a frame at 160: a hand-held pan reaches 20-40 there; beyond, a camera leaves no
#: quiet place for the gate to act on anyway.
REACH_PX = 32.0
#: A camera whose motion is below this stood still (zero, exactly): the histogram's own precision.
STILL_PX = 0.1
#: How many times the coarse peak moves to the mean of the flows within its neighbourhood (a mean shift) before the
#: fine histogram looks around it. A coarse peak of whole-pixel bins can land between a textured mover's tight cluster
#: and the background's wider one (a night picture's noisy flow), and the fine histogram, which prefers a tight cluster
#: to a wider one of several times its mass, then took the mover's for the camera's; the mean moves towards the larger
#: mass (made flows: of 18 readings it changed by over 0.2 px, 17 went to the background; the held-out night streams'
#: worst 100 pairs 1.020 -> 1.016x the frozen start; docs/notebook/2026-12-01-a-soft-camera-decision.md).
CENTRING_ROUNDS = 3


def _peak(vectors: Tensor, inside: Tensor, centre: Tensor, reach: float, bin_px: float) -> Tensor:
    """(B, 2): the centre of the most populated 3 x 3 bins of a 2-D histogram of ``vectors`` (B, N, 2) in bins of
    ``bin_px`` within ``reach`` of ``centre`` (B, 2), counting only ``inside`` (B, N) ones; ``centre`` where none
    are in reach."""
    b = vectors.shape[0]
    bins = 2 * round(reach / bin_px) + 1
    cells = ((vectors - centre[:, None] + reach) / bin_px).round().long()
    counted = inside & ((cells >= 0) & (cells < bins)).all(-1)
    cells = cells.clamp(0, bins - 1)
    index = (torch.arange(b, device=vectors.device)[:, None] * bins + cells[..., 1]) * bins + cells[..., 0]
    counts = torch.zeros(b * bins * bins, device=vectors.device, dtype=vectors.dtype)
    counts.index_add_(0, index.flatten(), counted.flatten().to(vectors.dtype))
    smoothed = F.avg_pool2d(counts.view(b, 1, bins, bins), 3, stride=1, padding=1).flatten(1)
    peak = smoothed.argmax(1)
    return centre + torch.stack([peak % bins, peak // bins], -1).to(vectors.dtype) * bin_px - reach


def _mean_near(vectors: Tensor, inside: Tensor, centre: Tensor, reach: float) -> tuple[Tensor, Tensor]:
    """(B, 2) and (B, 1): the mean of the ``inside`` ``vectors`` (B, N, 2) within ``reach`` of ``centre`` (B, 2) in
    each component (zero where none are), and how many there are."""
    near = (((vectors - centre[:, None]).abs() <= reach).all(-1) & inside).to(vectors.dtype)  # (B, N)
    count = near.sum(1, keepdim=True)
    return (vectors * near[..., None]).sum(1) / count.clamp_min(1.0), count


def _centred(vectors: Tensor, inside: Tensor, start: Tensor) -> Tensor:
    """(B, 2): ``start`` moved ``CENTRING_ROUNDS`` times to the mean of the ``inside`` ``vectors`` within a coarse bin
    and a half of it (kept where none are)."""
    centre = start
    for _ in range(CENTRING_ROUNDS):
        mean, count = _mean_near(vectors, inside, centre, 1.5 * COARSE_BIN_PX)
        centre = torch.where(count > 0, mean, centre)
    return centre


def camera_motion(flow: Tensor, reach_px: float = REACH_PX, near: Tensor | None = None) -> Tensor:
    """(B, 2, H, W) flow -> (B, 2, 1, 1): per pair, the mean of the flows in the most common flow's neighbourhood,
    zero below ``STILL_PX`` or with no flow within ``reach_px``; with ``near`` (B, 2, 1, 1), the most common flow within
    a coarse bin and a half of it (``near`` itself where no flow is). Two histograms find it: one over the whole reach
    in ``COARSE_BIN_PX`` bins (or ``near``), centred on its neighbourhood's mass (``CENTRING_ROUNDS``), then one of
    ``BIN_PX`` bins around that, and the mean of the flows in its peak's 3 x 3 bins (one fine histogram over a reach of
    32 px would have 410,000 bins a pair: 4.7 ms of a 49 ms step at 128x96). No gradient, no host sync (the GPU's
    captured step)."""
    vectors = flow.detach().flatten(2).transpose(1, 2)  # (B, N, 2)
    inside = (vectors.abs() <= reach_px).all(-1)
    if near is None:
        origin = torch.zeros(vectors.shape[0], 2, device=flow.device, dtype=flow.dtype)
        coarse = _peak(vectors, inside, origin, reach_px, COARSE_BIN_PX)
    else:
        coarse = near.flatten(1).to(flow.dtype)
    fine = _peak(vectors, inside, _centred(vectors, inside, coarse), 1.5 * COARSE_BIN_PX, BIN_PX)
    motion, count = _mean_near(vectors, inside, fine, 1.5 * BIN_PX)
    if near is not None:
        motion = torch.where(count > 0, motion, coarse)
    motion = motion * (motion.norm(dim=1, keepdim=True) >= STILL_PX).to(flow.dtype)  # zero if none in reach
    return motion[..., None, None]


def picture_translation(prev: Tensor, cur: Tensor) -> Tensor:
    """(B, 2, 1, 1): the translation that brings ``prev`` onto ``cur`` (B, 3, H, W) as a whole, by phase correlation
    of their grey levels under a Hann window, refined by a parabola through the peak and its neighbours (to about a
    third of a pixel: the still gate reads the flow's most common value near it).

    Why: where a pan crosses a flat surface (a bus roof, a wall) the net's flow has nothing to match there and stays
    near zero, and the flow's most common value can be that; the picture's edges together still show the pan
    (docs/notebook/2026-11-30-what-leaves-the-picture.md). ``torch.fft``, no host sync."""
    a, b = prev.mean(1), cur.mean(1)
    h, w = a.shape[-2:]
    window = torch.outer(*(torch.hann_window(n, periodic=False, device=a.device, dtype=a.dtype) for n in (h, w)))
    spectra = [torch.fft.rfft2((g - g.mean((1, 2), keepdim=True)) * window) for g in (a, b)]
    cross = spectra[1] * spectra[0].conj()
    surface = torch.fft.irfft2(cross / cross.abs().clamp_min(1e-12), s=(h, w))  # (B, H, W), peaked at the shift
    peak = surface.flatten(1).argmax(1)
    rows, cols = peak // w, peak % w
    batch = torch.arange(a.shape[0], device=a.device)

    def vertex(centre: Tensor, before: Tensor, after: Tensor) -> Tensor:
        bend = before - 2 * centre + after  # negative at a peak
        return torch.where(bend < -1e-12, 0.5 * (before - after) / bend.clamp_max(-1e-12), 0.0).clamp(-0.5, 0.5)

    top = surface[batch, rows, cols]
    dx = vertex(top, surface[batch, rows, (cols - 1) % w], surface[batch, rows, (cols + 1) % w])
    dy = vertex(top, surface[batch, (rows - 1) % h, cols], surface[batch, (rows + 1) % h, cols])
    cols = torch.where(cols > w // 2, cols - w, cols).to(a.dtype) + dx
    rows = torch.where(rows > h // 2, rows - h, rows).to(a.dtype) + dy
    return torch.stack([cols, rows], 1)[..., None, None]


#: The inlier radii of a camera model's fitting rounds, in px at 160 (``similarity_motion``, ``affine_motion``): the
#: translation's neighbourhood first, then the first fit's.
FIT_RADII_PX = (2.0, 1.0)

#: How a camera model is fitted to the inliers' flow about their centroid: (the flow's mean there (B, 2, 1, 1), the
#: flow less it, x and y from the centroid, the inliers) -> the model's flow (B, 2, H, W).
CentredFit = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]


def _similarity(mean: Tensor, d: Tensor, x: Tensor, y: Tensor, inliers: Tensor) -> Tensor:
    """The mean, a zoom and a roll: least squares in closed form."""
    du, dv = d.split(1, 1)
    spread = (inliers * (x * x + y * y)).sum((2, 3), keepdim=True).clamp_min(1e-6)
    zoom = (inliers * (du * x + dv * y)).sum((2, 3), keepdim=True) / spread
    roll = (inliers * (dv * x - du * y)).sum((2, 3), keepdim=True) / spread
    return torch.cat([mean[:, :1] + zoom * x - roll * y, mean[:, 1:] + zoom * y + roll * x], 1)


def _affine(mean: Tensor, d: Tensor, x: Tensor, y: Tensor, inliers: Tensor) -> Tensor:
    """The mean and any linear map: each component's slopes along x and y, the 2x2 normal equations in closed form."""
    sxx, syy, sxy = ((inliers * a * b).sum((2, 3), keepdim=True) for a, b in ((x, x), (y, y), (x, y)))
    sxd, syd = ((inliers * a * d).sum((2, 3), keepdim=True) for a in (x, y))
    det = (sxx * syy - sxy * sxy).clamp_min(1e-6)
    return mean + (syy * sxd - sxy * syd) / det * x + (sxx * syd - sxy * sxd) / det * y


def _fitted_motion(flow: Tensor, start: Tensor, weight: Tensor, radii: tuple[float, ...], fit: CentredFit) -> Tensor:
    """(B, 2, H, W): ``fit``'s camera model fitted to ``flow`` by weighted least squares, from ``start`` (a
    translation, B x 2 x 1 x 1, or a model's flow, B x 2 x H x W): each round fits the pixels within its radius of the
    fit so far, weighted by ``weight`` (B, 1, H, W). About the inliers' centroid the translation and the linear part
    separate: closed form, no solver, no host sync. A round with no inliers keeps the fit before it."""
    h, w = flow.shape[-2:]
    ys = torch.arange(h, device=flow.device, dtype=flow.dtype).view(1, 1, h, 1)
    xs = torch.arange(w, device=flow.device, dtype=flow.dtype).view(1, 1, 1, w)
    model = start.expand_as(flow)
    for radius in radii:
        # squared: a vector norm over the channels costs a millisecond at 128x96 on a CPU, the rest of the fit less
        inliers = weight * (((flow - model) ** 2).sum(1, keepdim=True) < radius * radius).to(flow.dtype)
        total = inliers.sum((2, 3), keepdim=True)
        count = total.clamp_min(1e-6)
        x = xs - (inliers * xs).sum((2, 3), keepdim=True) / count
        y = ys - (inliers * ys).sum((2, 3), keepdim=True) / count
        mean = (inliers * flow).sum((2, 3), keepdim=True) / count
        model = torch.where(total > 1, fit(mean, flow - mean, x, y, inliers), model)
    return model


def similarity_motion(flow: Tensor, start: Tensor, weight: Tensor, radii: tuple[float, ...] = FIT_RADII_PX) -> Tensor:
    """(B, 2, H, W): the camera's motion as a similarity (a pan, a zoom and a roll) fitted to ``flow`` from the
    translation ``start``, the pixels weighted by ``weight`` (``_fitted_motion``). A hand-held pan turns and zooms a
    little too, and a translation's flow is a pixel off at the picture's corners for a roll of 1° at 160."""
    return _fitted_motion(flow, start, weight, radii, _similarity)


def affine_motion(flow: Tensor, start: Tensor, weight: Tensor, radii: tuple[float, ...] = FIT_RADII_PX) -> Tensor:
    """(B, 2, H, W): the camera's motion as an affine map fitted to ``flow`` from ``start`` (a translation, or the
    similarity fitted before it), the pixels weighted by ``weight`` (``_fitted_motion``).

    Why: a phone's rolling shutter reads the rows one after another through most of the frame interval, so where a
    hand's speed changes from one frame to the next the flow between them changes down the picture, linearly in the
    row (a shear and a stretch), which no similarity holds. Made with exact flow (a photograph filmed by a hand-held
    camera, rows read over 0.7-0.9 of the interval), the shipped net's error went from 0.11 to 0.42 px as the
    rolling shutter came in, where DIS-medium's went from 0.24 to 0.27: the still gate followed a similarity there
    (docs/notebook/2026-12-02-a-rolling-shutter-shears-the-pan.md)."""
    return _fitted_motion(flow, start, weight, radii, _affine)
