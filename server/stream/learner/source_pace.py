"""How often a source really sends frames, read off the frames the worker gets.

Why: a stream's rate is decided when its source opens, from what the container says (``sizing.stream_fps``), and the
frame budget ΔS is its inverse. Some sources send fewer frames than they say: a file whose encoder left most frames out
(OpenCV's tree.avi says 15 fps and holds 68 frames over 29.5 s), a phone's variable-rate video, a webcam that
lengthens its exposure in the dark. Judged against the rate said, such a stream was walked down to a smaller learning
size while each frame had six times the time it needed. The ring numbers every frame the decoder writes, so the
frames the worker skipped (it was behind, or rebuilding) are told apart from frames the source never sent: the time
between two frames the worker got, over how many the decoder wrote between them, is the source's own interval. The
time is the source's own clock (a file's timestamps, a live stream's, a browser webcam's arrivals), not when the
decoder wrote the frame: a decoder slower than the source (a large file on busy cores) would otherwise lengthen ΔS,
the learner would take a larger size and more of the cores, and the decoder fall further behind.
"""

from __future__ import annotations

from collections import deque

import numpy as np

SPAN = 4  # frames per reading: a rate resampled from another alternates long and short intervals (25 -> 10 fps:
# 0.12 and 0.08 s), which a span of frames averages out
RECENT = 16  # readings kept; their median ignores a stall or a burst
LEAST = 4  # readings needed before the pace is read


class SourcePace:
    """The time between the frames the decoder wrote: the median, over the last ``RECENT`` frames the worker got, of
    the time back to the one ``SPAN`` frames before, over how many frames the decoder wrote between them."""

    def __init__(self) -> None:
        self.frames: deque[tuple[float, int]] = deque(maxlen=RECENT + SPAN)  # source times, ring sequence numbers

    def observe(self, source_time: float, seq: int) -> int:
        """A frame the worker got; how many frames of the stream it is after the one before (1: none skipped)."""
        frames = seq - self.frames[-1][1] if self.frames else 1
        self.frames.append((source_time, seq))
        return frames

    @property
    def interval(self) -> float | None:
        """Seconds between the source's frames, or None while too few frames were seen."""
        if len(self.frames) < SPAN + LEAST:
            return None
        t, seq = np.array(self.frames).T
        return float(np.median((t[SPAN:] - t[:-SPAN]) / (seq[SPAN:] - seq[:-SPAN])))
