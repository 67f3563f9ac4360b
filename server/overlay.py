"""The picture a viewer gets per frame: one JPEG, the stream's size, the current frame blended 50/50 with the
colour coding of the learned flow (``models.flow_viz``: hue = direction, saturation = speed, white = still)."""

from __future__ import annotations

import cv2
import numpy as np

from models.flow_viz import flow_to_color


def overlay_jpeg(frame: np.ndarray, flow: np.ndarray, quality: int) -> bytes:
    """``frame`` uint8 [H, W, 3] RGB, ``flow`` [H, W, 2] in pixels -> JPEG bytes."""
    blended = cv2.addWeighted(frame, 0.5, flow_to_color(flow), 0.5, 0.0)
    ok, data = cv2.imencode(".jpg", cv2.cvtColor(blended, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise RuntimeError("JPEG encoding failed")
    return data.tobytes()
