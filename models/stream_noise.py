"""A night camera's noise against its picture's detail: how to tell it, and the smoothing that the net then sees.

Why: at night a camera's sensor noise is as large as its picture's detail, and the shipped net, pretrained on mildly
noisy clips, follows the noise. Learning does not mend it: the made pairs a stream learns from say smoothing hurts
(a made pair carries its source frame's noise into both frames, where it moves with the picture like detail), and
given the true flow as its loss the learner at its rates reaches only 0.994 of its start at night
(docs/notebook/2026-12-01-the-still-flow-lead-withdrawn.md). Smoothing the frames before the net does: on the night
streams of the benchmark a Gaussian of 0.6 px to past 2 took the frozen net to 0.72-0.94 of its error at each
stream's best width, where on the clean and blurred streams it cost 1.5-73 %
(docs/notebook/2026-12-06-a-night-cameras-frames-smoothed.md). So the stream reads its own noise (``sensor_noise``:
one frame's noise off the real pair's residual under the newest flow, as the still gate reads it, once the pair's
change of light and its coarse picture are taken out, so that a flicker does not count) against its picture's detail
(``detail``: the mean gradient of its smoothed grey picture), and smooths only where the noise is the larger: there
the benchmark's night streams read 1.3-4.0 times their detail, its other streams and real clips at most 0.23. The
smoothing keeps the edges that stand clear of the noise (``edge_keeping``): a Gaussian carried a mover's edge onto the
still ground beside it, and the net its motion with it.

Tensor ops on the pair's device; the decision whether to smooth at all is read on the host every ``READ_EVERY``
pairs, as a starved codec's is (``models.block_codec``), so a stream that is not noisy is shown as it was, bit for
bit and at no cost.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .block_codec import READ_EVERY
from .known_motion import light_change, sensor_noise
from .luma import luma

#: The reading is taken on every ``READ_PAIR_EVERY``-th pair (3-4 ms a pair at 128x96 on one CPU thread, 25 at
#: 320x240), and the newest weighs this much in its running mean (about the last 20 pairs).
READ_PAIR_EVERY, READING_WEIGHT = 5, 0.25
#: Smoothing starts where the noise reads over this share of the detail; its standard deviation (px) is
#: ``SMOOTHING_PER_READING`` times the reading, up to ``MAX_SMOOTHING``.
NOISY, SMOOTHING_PER_READING, MAX_SMOOTHING = 0.5, 0.4, 1.5
#: The Gaussian's half-width (px): 2.7 standard deviations at ``MAX_SMOOTHING``.
RADIUS = 4
#: The smoothing keeps edges: a neighbour counts less the further its colour lies from the pixel's, by a Gaussian of
#: this many of one frame's noise standard deviations (``edge_keeping``). Within the noise it averages as the plain
#: Gaussian does; across a mover's edge it does not, where the Gaussian spread the mover's motion onto the still ground
#: beside it (tree.avi made a night camera's: its loss against the net as shipped lay within 12 px of the movers;
#: docs/notebook/2026-12-07-a-night-cameras-edges-kept.md).
EDGE_NOISE = 3.0
#: The noise is read on the pair less its picture smoothed by this much (px): the fine grain alone.
COARSE = 2.0
#: The detail is read on the grey picture smoothed by this much (px), so that its own noise does not count as detail.
DETAIL_SMOOTHING = 1.0


def gaussian(images: Tensor, sigma: Tensor | float) -> Tensor:
    """``images`` (B, C, H, W) smoothed by a Gaussian of standard deviation ``sigma`` px (a 0-d tensor: no host read;
    0 leaves them as they were), separable, ``RADIUS`` px each side, edges replicated."""
    sigma = torch.as_tensor(sigma, dtype=images.dtype, device=images.device)
    taps = torch.arange(-RADIUS, RADIUS + 1, dtype=images.dtype, device=images.device)
    kernel = torch.exp(-0.5 * (taps / sigma.clamp_min(1e-3)) ** 2)
    kernel = kernel / kernel.sum()
    c = images.shape[1]
    across, down = kernel.view(1, 1, 1, -1).expand(c, 1, 1, -1), kernel.view(1, 1, -1, 1).expand(c, 1, -1, 1)
    rows = F.conv2d(F.pad(images, (RADIUS, RADIUS, 0, 0), mode="replicate"), across, groups=c)
    return F.conv2d(F.pad(rows, (0, 0, RADIUS, RADIUS), mode="replicate"), down, groups=c)


def edge_keeping(images: Tensor, sigma: Tensor, noise: Tensor) -> Tensor:
    """``images`` (B, C, H, W) smoothed by a bilateral filter, along the rows and then down the columns (a separable
    approximation: 18 taps, not 81): each neighbour within ``RADIUS`` px weighs as the Gaussian of ``sigma`` px
    would weigh it, times a Gaussian of its mean squared colour difference from the pixel with standard deviation
    ``EDGE_NOISE`` times ``noise`` (one frame's noise; 0-d tensors: no host read); edges replicated."""
    taps = torch.arange(-RADIUS, RADIUS + 1, dtype=images.dtype, device=images.device)
    spatial = -(taps**2) / (2 * sigma.to(images).clamp_min(1e-3) ** 2)
    tolerance = 2 * (EDGE_NOISE * noise.to(images)).clamp_min(1e-4) ** 2
    for dim in (-1, -2):
        size = images.shape[dim]
        padded = F.pad(images, (RADIUS, RADIUS, 0, 0) if dim == -1 else (0, 0, RADIUS, RADIUS), mode="replicate")
        total, weights = torch.zeros_like(images), torch.zeros_like(images[:, :1])
        for k in range(2 * RADIUS + 1):
            tap = padded.narrow(dim, k, size)
            weight = torch.exp(spatial[k] - (tap - images).square().mean(1, keepdim=True) / tolerance)
            total, weights = total.addcmul(tap, weight), weights + weight
        images = total / weights
    return images


def detail(picture: Tensor) -> Tensor:
    """(0-d) How much detail ``picture`` (1, 3, H, W) in [0, 1] holds: the mean length of its grey picture's gradient,
    smoothed first by ``DETAIL_SMOOTHING``."""
    grey = gaussian(luma(picture), DETAIL_SMOOTHING)
    return torch.hypot(grey[..., 1:, 1:] - grey[..., :-1, 1:], grey[..., 1:, 1:] - grey[..., 1:, :-1]).mean()


class StreamNoise:
    """How noisy the stream is against its picture's detail (module docstring): a running mean of the reading over
    its real pairs from none (0-d tensor on their device), and ``smoothing``, the Gaussian (px) it asks for;
    ``noisy``, read on the host every ``READ_EVERY`` pairs: whether it smooths at all (False before the first).
    ``smoothing`` is asked for only once ``noisy``, so a reading has been taken. ``level``: a running mean of one
    frame's noise itself, as the smoothing's edges are told from it (``edge_keeping``)."""

    def __init__(self) -> None:
        self.reading: Tensor | None = None
        self.level: Tensor | None = None
        self.pairs = 0
        self.noisy = False

    def observe(self, pair: Tensor, flow: Tensor) -> None:
        """Read the real ``pair`` (1, 6, H, W) under ``flow`` (1, 2, H, W), the newest flow shown, where its turn came;
        decide on the host where that turn came."""
        self.pairs += 1
        if self.pairs % READ_PAIR_EVERY:
            return
        lit = torch.cat([pair[:, :3] * light_change(pair, flow), pair[:, 3:6]], 1)  # a flicker's change is no noise
        lit = lit - gaussian(lit, COARSE)  # nor is what is left of it over the rows: the band's edges
        level = sensor_noise(lit, flow).reshape(()).nan_to_num(0.0)
        reading = (level / detail(pair[:, 3:6]).clamp_min(1e-4)).nan_to_num(0.0)
        if self.reading is None or self.reading.device != pair.device:
            # From no noise, so that one pair alone does not decide.
            self.reading, self.level = torch.zeros_like(reading), torch.zeros_like(level)
        self.reading = torch.lerp(self.reading, reading, READING_WEIGHT)
        self.level = torch.lerp(self.level, level, READING_WEIGHT)
        if self.pairs % READ_EVERY == 0:
            self.noisy = bool(self.reading > NOISY)

    @property
    def smoothing(self) -> Tensor:
        """(0-d) The Gaussian's standard deviation (px) that the stream's noise asks for."""
        assert self.reading is not None, "observe a pair first"
        return (self.reading * SMOOTHING_PER_READING).clamp(max=MAX_SMOOTHING)

    def __call__(self, pair: Tensor) -> Tensor:
        """``pair`` (B, 6, H, W) as the net is shown it: each frame smoothed, its edges kept (``edge_keeping``), where
        the stream is noisy, else itself."""
        if not self.noisy:
            return pair
        assert self.level is not None, "observe a pair first"
        frames = pair.reshape(-1, 3, *pair.shape[-2:])
        return edge_keeping(frames, self.smoothing, self.level).reshape(pair.shape)
