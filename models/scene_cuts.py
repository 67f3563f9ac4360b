"""Scene cuts: where one shot ends and the next begins, two consecutive frames show different scenes and there is no
flow to find.

An edited video (a film, a clip of clips) cuts between shots. A flow net given such a pair still answers, with large
motion that means nothing, and the overlay shows it; the online learner would learn from a pair whose every pixel
contradicts brightness constancy. So the learner treats the frame after a cut as the first of a new stream: it pairs
it with itself (no motion, nothing to learn) and says so.

The test is the classic one of shot-boundary detection (PySceneDetect's histogram detector is another of its
kind): the correlation of the two frames' hue-saturation histograms. Motion, even fast, mostly rearranges the same
colours, and brightness (exposure, flicker) is left out; a cut replaces them. On the real clips at hand, at their own
size, pairs within a shot correlate 0.92 or more, the five cuts of a held-out street clip 0.27-0.62
(bench/results/heldout/realflow-bikes-216x88.md lists them: its pseudo ground truth passes its own forward-backward
test on 1-8 % of their pixels, on 90 % of a typical pair's). docs/models.md#scene-cuts has the false cuts on
generated clips.
"""

from __future__ import annotations

import cv2
import numpy as np

#: Below this correlation of two frames' hue-saturation histograms, the second frame begins a new shot.
CUT_CORRELATION = 0.7
BINS = (16, 16)  # hue, saturation
SIDE = 96  # frames are compared at about this long side: the statistic needs no more, and costs the same at any size


def colour_histogram(frame: np.ndarray) -> np.ndarray:
    """The normalised hue-saturation histogram of a uint8 RGB frame [H, W, 3]."""
    h, w = frame.shape[:2]
    step = max(1, max(h, w) // SIDE)
    hsv = cv2.cvtColor(np.ascontiguousarray(frame[::step, ::step]), cv2.COLOR_RGB2HSV)
    hist = cv2.calcHist([hsv], [0, 1], None, list(BINS), [0, 180, 0, 256])
    return cv2.normalize(hist, hist).ravel()


def is_cut(before: np.ndarray, after: np.ndarray) -> bool:
    """Whether histograms ``before`` and ``after`` (``colour_histogram``) belong to different shots."""
    return float(cv2.compareHist(before, after, cv2.HISTCMP_CORREL)) < CUT_CORRELATION


class SceneCuts:
    """Fed a stream's frames in order: whether each one begins a new shot (never the first)."""

    def __init__(self) -> None:
        self.previous: np.ndarray | None = None

    def __call__(self, frame: np.ndarray) -> bool:
        hist = colour_histogram(frame)
        cut = self.previous is not None and is_cut(self.previous, hist)
        self.previous = hist
        return cut
