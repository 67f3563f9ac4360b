"""A camera's exposure changes between frames; the flow must not read that as motion.

Webcams and phones adjust exposure and white balance on their own, and a step of it shifts every pixel's brightness
at once: on box (pair 361) the picture darkened by 9.6 of 255 from one frame to the next, and every layer that
compares the two frames' intensities took the change for motion where the image is flat, a table top moving by up
to 10 px: that one pair made 38 % of the amount by which the shipped net's error on the clip's moving pixels
exceeded Farneback's. A shift per channel by the median difference between the frames undoes such a step, and
anything that moves (fewer than half the pixels) leaves the median where it was. Differences of ``STEP_LIMIT`` or
more are no exposure step and are left out: a hand close to the camera may fill most of the picture, and its
difference from the background it covers would otherwise be taken for the step and shift the whole frame.

A gain as well, where it clearly explains the frames better. Exposure scales brightness, so a shift undoes a gain
only at middling brightness: before a static camera whose picture brightened by 6 % over a shaded background, the
net read the change as 1.4 px of motion on average (a test). The gain is the slope of a resistant line through the
differences, the median difference in the darker and in the brighter half of the samples, one for the three channels
(exposure scales them alike). Under a pan or a large mover the differences come from the motion, and such a line
fits them too: taken always, the gain cost the generator's held-out clips 2 % of their all-pixel EPE and bikes 1.5 %
of its moving pixels'; with a slope per channel, a pan's differences gave one channel alone a slope of 0.3. So it
is taken only where it leaves clearly less difference than the shift (``GAIN_EVIDENCE``). Frozen net, exploratory:
on generated clips of small movers before a static camera (the generator's flicker), all-pixel EPE 0.081 → 0.063 px;
the generator's held-out clips 1.121 → 1.119; the real clips unchanged (box's all pixels 0.670 → 0.668 times the
better classical method's). A gain alone, a median ratio, did worse on tree (all-pixel EPE 0.84 times the better
classical method's against 0.81)."""

from __future__ import annotations

import torch
from torch import Tensor

from .order_statistics import median, nan_median

#: The largest brightness step between two frames taken for the camera's (a tenth of the range; box's was 0.038).
STEP_LIMIT = 0.1
#: A gain is taken where the median absolute difference it leaves is below this share of what the shift leaves.
GAIN_EVIDENCE = 0.7
#: The largest change of contrast taken for the camera's (20 %), and the least spread between the darker and the
#: brighter half's median brightness that a slope is read from (a flat picture has no slope to read).
MAX_GAIN_CHANGE, MIN_SPREAD = 0.2, 0.05


def _median(t: Tensor, where: Tensor) -> Tensor:
    """(B, C): the median of ``t`` (B, C, N) over the samples ``where`` is true; NaN where there is none."""
    return nan_median(torch.where(where, t, torch.full_like(t, float("nan"))))


def _samples(t: Tensor) -> Tensor:
    """Every second pixel of every second row, flattened: (B, C, H, W) -> (B, C, N). As robust as the whole
    picture, and a quarter of the sorting (the whole picture's median took 0.43 ms of a learning step at 128x96
    on one thread)."""
    return t[..., ::2, ::2].flatten(2)


def match_exposure(frames: Tensor) -> Tensor:
    """(B, 6, H, W) previous + current RGB -> the same pair with the current frame brought to the previous one's
    exposure (module docstring): shifted, per channel, by the median of previous - current over the samples whose
    difference is below ``STEP_LIMIT``, and scaled about their median brightness by one gain for the three channels
    where that leaves clearly less difference (``GAIN_EVIDENCE``); then clipped to [0, 1], as the camera clips.
    Unchanged where every difference is that large (a cut)."""
    prev, cur = frames[:, :3], frames[:, 3:]
    previous, current = _samples(prev), _samples(cur)
    difference = previous - current
    step = difference.abs() < STEP_LIMIT
    shift = _median(difference, step).nan_to_num(0.0)
    middle = _median(current, step).nan_to_num(0.5)
    darker, brighter = step & (current <= middle[..., None]), step & (current > middle[..., None])
    spread = _median(current, brighter) - _median(current, darker)
    slope = ((_median(difference, brighter) - _median(difference, darker)) / spread).nan_to_num(0.0)
    slope = torch.where(spread > MIN_SPREAD, slope, torch.zeros_like(slope))
    # One gain for the three channels: exposure scales them alike, where a pan's differences give each its own slope.
    slope = slope.median(-1, keepdim=True).values.clamp(-MAX_GAIN_CHANGE, MAX_GAIN_CHANGE)
    # What each leaves of the difference, on the samples: the gain only where it clearly explains more.
    left = difference - shift[..., None]
    shifted, gained = (
        median(t.abs()).sum(-1, keepdim=True) for t in (left, left - slope[..., None] * (current - middle[..., None]))
    )
    slope = torch.where(gained < GAIN_EVIDENCE * shifted, slope, torch.zeros_like(slope))
    shift, slope, middle = (t[..., None, None] for t in (shift, slope, middle))
    return torch.cat([prev, (cur + shift + slope * (cur - middle)).clamp(0.0, 1.0)], 1)
