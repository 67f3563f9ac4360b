"""The sizes and the rate of a stream, from its source: the picture viewers see, the sizes the network may learn at,
and the frame rate. Pure rules, shared by the decoder, the worker and ``bench.realflow``.

Why two sizes: a viewer wants the source's own picture (a 640x480 camera stretched up from 128x96 is a blur), while
the network learns at the largest size the frame budget allows. Both keep the source's aspect ratio.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

#: The flow nets work on sides that divide by 8 (the service's net's coarsest level is 1/8 of the frame).
NET_MULTIPLE = 8
#: The pixels of the size the nets were made for (their pretraining), and of what two cores hold in real time with the
#: fast net (bench/results/service-clip-cpu.md; a 16:9 clip at 184x104: bench/results/heldout/service-clip-cpu.md):
#: the largest learning size on CPU where none is set is the picture's aspect ratio with about as many
#: (``made_for_side``). A step costs by the pixel, so a wide picture gets a longer side for the same cost: 16:9 learns
#: at 184x104, not 160x88. On a GPU the picture's own: a step there costs about the same at every size.
MADE_FOR_PIXELS = 160 * 120
#: Candidate learning sizes step down by this much on the long side, down to ``MIN_LEARNING_SIDE``.
LADDER_STEP = 16
MIN_LEARNING_SIDE = 64
#: A source that does not say its rate (a browser webcam, some live streams) is served at this rate by default.
FALLBACK_FPS = 10.0
#: A nominal rate outside this range is a broken header, not a rate.
PLAUSIBLE_FPS = (0.5, 240.0)
#: Pictures whose aspect ratios differ by at most this share have the same shape: the rounding of a size (641x479 is
#: 640x480's) or of one rendition to another (1280x720 and 426x240, 0.2 %). 4:3 against 16:9 differ by a third.
SAME_SHAPE = 0.03

Size = tuple[int, int]  # (width, height)


def parse_size(text: str) -> Size:
    """``"640x480"`` (or ``"128"``: a square) -> (640, 480): a size on a command line (``argparse``'s ``type``), which
    refuses anything else in words."""
    sides = text.lower().split("x")
    try:
        width, height = (int(side) for side in sides * (2 if len(sides) == 1 else 1))
    except ValueError:  # not a number, or not two of them
        raise argparse.ArgumentTypeError(f"a size is WIDTHxHEIGHT, e.g. 640x480, got {text!r}") from None
    if width <= 0 or height <= 0:
        raise argparse.ArgumentTypeError(f"a size has positive sides, got {text!r}")
    return width, height


def fit(width: int, height: int, long_side: int, multiple: int = NET_MULTIPLE) -> Size:
    """``width`` x ``height`` scaled so that its longer side is ``long_side``, both sides rounded to ``multiple``."""
    scale = long_side / max(width, height)
    return (
        max(multiple, int(width * scale / multiple + 0.5) * multiple),
        max(multiple, int(height * scale / multiple + 0.5) * multiple),
    )


def made_for_side(width: int, height: int) -> int:
    """The long side at which a ``width`` x ``height`` picture's learning size (``fit``) comes closest to
    ``MADE_FOR_PIXELS`` pixels, never above the picture's own: the CPU's largest learning side and the motion cap's
    floor. 160 for 4:3; 184 for 16:9 (160x88 would leave a quarter of the pixels a step can afford unused)."""
    sides = range(NET_MULTIPLE, max(width, height, NET_MULTIPLE) + 1, NET_MULTIPLE)

    def shortfall(side: int) -> int:
        w, h = fit(width, height, side)
        return abs(w * h - MADE_FOR_PIXELS)

    return min(sides, key=shortfall)


def display_size(width: int, height: int, max_side: int) -> Size:
    """The picture viewers get: the source's size (even sides, as video encoders want), shrunk to ``max_side`` on its
    long side when larger; never enlarged."""
    return fit(width, height, min(max(width, height), max_side), 2)


def same_shape(a: Size, b: Size) -> bool:
    """Whether two sizes have the same aspect ratio, to ``SAME_SHAPE``."""
    return abs(math.log(a[0] * b[1] / (a[1] * b[0]))) <= SAME_SHAPE


def picture_for(upright: Size, picture: Size | None, max_side: int) -> Size:
    """The picture a frame of ``upright`` size is shown in, where the stream's picture is ``picture`` (None: it is the
    first frame). A frame of the picture's shape is scaled to it (another rendition of the same camera); one of another
    shape, a phone turned or another camera's, gets a picture of its own (``display_size``): scaled into the old one
    it would be squashed, and a flow learned from it warped."""
    fitted = display_size(*upright, max_side)
    return picture if picture is not None and same_shape(fitted, picture) else fitted


def learning_size(display: Size, width: int | None, height: int | None, side: int) -> Size:
    """The largest learning size of a stream: ``width`` x ``height`` when both are given, one of them with the
    picture's aspect ratio, or the picture's aspect ratio with a long side of ``side`` (never above the picture's)."""
    if width and height:
        return width, height
    if width:
        return width, max(NET_MULTIPLE, int(display[1] * width / display[0] / NET_MULTIPLE + 0.5) * NET_MULTIPLE)
    if height:
        return max(NET_MULTIPLE, int(display[0] * height / display[1] / NET_MULTIPLE + 0.5) * NET_MULTIPLE), height
    return fit(*display, min(side, max(display)))


def learning_ladder(display: Size, largest_side: int) -> list[Size]:
    """The learning sizes the budget controller chooses from, largest first: the display's aspect ratio, long sides
    from ``largest_side`` (at most the display's own) down to ``MIN_LEARNING_SIDE`` in steps of ``LADDER_STEP``."""
    top = min(largest_side, max(display))
    sides = range(top, min(top, MIN_LEARNING_SIDE) - 1, -LADDER_STEP)
    ladder: list[Size] = []
    for side in sides:
        size = fit(*display, side)
        if size not in ladder:
            ladder.append(size)
    return ladder


@dataclass(frozen=True)
class LearningSizes:
    """How a stream's learning sizes follow from its picture (picklable: the learner process makes them again when
    the picture turns): ``side`` the largest long side asked for (None: the picture's own on a GPU, ``made_for_side``
    on CPU), ``width`` / ``height`` as the stream asked, ``auto`` whether the budget may move along the ladder."""

    side: int | None
    gpu: bool
    width: int | None
    height: int | None
    auto: bool

    def ladder(self, display: Size) -> tuple[Size, ...]:
        """The learning sizes, largest first, for a picture of ``display``: one size where it is fixed."""
        side = self.side or (max(display) if self.gpu else made_for_side(*display))
        largest = learning_size(display, self.width, self.height, side)
        return tuple(learning_ladder(largest, max(largest))) if self.auto else (largest,)


def stream_fps(requested: float | None, source_fps: float | None, max_fps: float) -> float:
    """The stream's rate 1/ΔS: what was asked for, else the source's own rate capped at ``max_fps``. Never faster than
    a source that says its rate: frames are never duplicated, so a faster ΔS would be a budget no frame arrives for."""
    known = source_fps if source_fps and PLAUSIBLE_FPS[0] <= source_fps <= PLAUSIBLE_FPS[1] else None
    fps = requested or min(known or FALLBACK_FPS, max_fps)
    return min(fps, known) if known else fps
