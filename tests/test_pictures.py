"""The pictures of a frame: the flow's colours at the picture's size, an overlay that keeps still parts as they are,
and one colour scale per stream that follows speeds slowly instead of each frame's own maximum."""

from __future__ import annotations

import cv2
import numpy as np

from models.flow_viz import flow_to_color
from server.stream.pictures import JPEG_KINDS, OPACITY, FlowScale, Painter, kinds_mask, mask_kinds


def decode(jpeg: bytes) -> np.ndarray:
    return cv2.cvtColor(cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB).astype(float)


def test_frame_and_overlay_are_the_pictures_size_the_flow_the_learning_size_and_the_overlay_tints_only_motion():
    rng = np.random.default_rng(0)
    frame = cv2.GaussianBlur(rng.integers(0, 255, (120, 160, 3), np.uint8), (0, 0), 2)
    flow = np.zeros((30, 40, 2), np.float32)  # a quarter of the picture's size
    flow[:, 20:, 0] = 2.0  # the right half moves right, 2 px of the learning size = 8 px of the picture
    images = Painter(95).render(frame, flow, scale=8.0, kinds=list(JPEG_KINDS))
    shown, colours, overlay = (decode(images[k]) for k in ("frame", "flow", "overlay"))
    assert shown.shape == overlay.shape == (120, 160, 3) and colours.shape == (30, 40, 3)
    still, moving = (slice(None), slice(0, 70)), (slice(None), slice(90, 160))
    assert np.abs(overlay[still] - shown[still]).mean() < 3, "still parts must keep the frame as it is"
    red = flow_to_color(np.array([[[1.0, 0.0]]]), 1.0)[0, 0].astype(float)  # full speed to the right
    white = np.full(3, 255.0)
    expected = frame[moving] * (1 - OPACITY + OPACITY * red / 255)
    assert np.abs(colours[:, 23:] - red).mean() < 6 and np.abs(colours[:, :17] - white).mean() < 6
    assert np.abs(overlay[moving] - expected).mean() < 4


def test_only_the_wanted_kinds_are_rendered():
    images = Painter(80).render(np.zeros((8, 8, 3), np.uint8), np.zeros((8, 8, 2), np.float32), 1.0, ["frame"])
    assert list(images) == ["frame"]
    assert mask_kinds(kinds_mask({"flow", "flow16", "overlay"})) == ["overlay", "flow"]


def test_flow_scale_follows_speeds_slowly_and_has_a_floor():
    scale = FlowScale()
    fast = np.full((10, 10, 2), 3.0, np.float32)  # |v| = 4.24 px
    values = [scale.update(fast, factor=2.0) for _ in range(30)]
    assert values[0] < values[5] < values[-1] <= 8.49 and values[-1] > 8.3  # rises to 2 x 4.24 within a few frames
    after = [scale.update(np.zeros((10, 10, 2), np.float32), factor=2.0) for _ in range(10)]
    assert after[-1] > 0.7 * values[-1], "one still moment must not rescale the colours"
    for _ in range(500):
        scale.update(np.zeros((10, 10, 2), np.float32), 2.0)
    assert scale.value == FlowScale.FLOOR
