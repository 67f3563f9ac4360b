"""A camera's exposure changes between frames; the flow must not read that as motion.

Webcams and phones adjust exposure and white balance on their own, and a step of it shifts every pixel's brightness
at once: on box (pair 361) the picture darkened by 9.6 of 255 from one frame to the next, and every layer that
compares the two frames' intensities took the change for motion where the image is flat, a table top moving by up
to 10 px: that one pair made 38 % of the amount by which the shipped net's error on the clip's moving pixels
exceeded Farneback's. A shift per channel by the median difference between the frames undoes such a step, and
anything that moves (fewer than half the pixels) leaves the median where it was. Differences of ``STEP_LIMIT`` or
more are no exposure step and are left out: a hand close to the camera may fill most of the picture, and its
difference from the background it covers would otherwise be taken for the step and shift the whole frame. A shift,
not a gain: on the real clips a median ratio did worse (tree's all-pixel EPE 0.84 times the better classical
method's against 0.81 with the shift; exploratory, frozen net)."""

from __future__ import annotations

import torch
from torch import Tensor

#: The largest brightness step between two frames taken for the camera's (a tenth of the range; box's was 0.038).
STEP_LIMIT = 0.1


def match_exposure(frames: Tensor) -> Tensor:
    """(B, 6, H, W) previous + current RGB -> the same pair with the current frame shifted, per channel, by the
    median of previous - current over every second pixel of every second row (as robust, and a quarter of the
    sorting: the whole picture's median took 0.43 ms of a learning step at 128x96 on one thread), leaving out
    differences of ``STEP_LIMIT`` or more; no shift where every difference is that large (a cut)."""
    prev, cur = frames[:, :3], frames[:, 3:]
    difference = (prev - cur)[..., ::2, ::2].flatten(2)
    candidates = torch.where(difference.abs() < STEP_LIMIT, difference, torch.full_like(difference, float("nan")))
    shift = candidates.nanmedian(-1).values.nan_to_num(0.0)[..., None, None]
    return torch.cat([prev, cur + shift], 1)
