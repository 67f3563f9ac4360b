"""The pictures a viewer can get per frame, each one JPEG of the stream's size: ``overlay`` (the current frame
blended 50/50 with the colour coding of the learned flow), ``frame`` (the raw frame) and ``flow`` (the colour
coding alone: ``models.flow_viz``, hue = direction, saturation = speed, white = still). Viewers that composite
themselves (opacity, side by side, arrows) ask for ``frame`` and ``flow``; the rest take the overlay."""

from __future__ import annotations

import cv2
import numpy as np

from models.flow_viz import flow_to_color

KINDS = ("overlay", "frame", "flow")


def _jpeg(rgb: np.ndarray, quality: int) -> bytes:
    ok, data = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise RuntimeError("JPEG encoding failed")
    return data.tobytes()


def frame_images(frame: np.ndarray, flow: np.ndarray, quality: int) -> dict[str, bytes]:
    """``frame`` uint8 [H, W, 3] RGB, ``flow`` [H, W, 2] in pixels -> {kind: JPEG bytes} for every kind."""
    color = flow_to_color(flow)
    blended = cv2.addWeighted(frame, 0.5, color, 0.5, 0.0)
    return {"overlay": _jpeg(blended, quality), "frame": _jpeg(frame, quality), "flow": _jpeg(color, quality)}
