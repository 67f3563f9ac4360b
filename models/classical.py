"""Classical optical flow (OpenCV) on the same frames: the yardstick the learned flow must meet.

Why these: Farneback (dense polynomial expansion) and DIS (dense inverse search, fast/medium
presets) are OpenCV's dense methods, need no training and run on CPU in milliseconds.
"""

from __future__ import annotations

from collections.abc import Callable

import cv2
import numpy as np

FlowMethod = Callable[[np.ndarray, np.ndarray], np.ndarray]


def _gray(frame: np.ndarray) -> np.ndarray:
    frame = np.asarray(frame)
    if frame.ndim != 3 or frame.shape[2] != 3 or frame.dtype != np.uint8:
        raise ValueError(f"frames must be uint8 [H, W, 3] RGB, got {frame.dtype} {frame.shape}")
    return cv2.cvtColor(frame, cv2.COLOR_RGB2GRAY)


def farneback(prev: np.ndarray, cur: np.ndarray) -> np.ndarray:
    """Farneback with OpenCV's documented example parameters (3 levels, 15 px window)."""
    return cv2.calcOpticalFlowFarneback(_gray(prev), _gray(cur), None, 0.5, 3, 15, 3, 5, 1.2, 0)


def _dis(preset: int) -> FlowMethod:
    engine = cv2.DISOpticalFlow_create(preset)

    def flow(prev: np.ndarray, cur: np.ndarray) -> np.ndarray:
        return engine.calc(_gray(prev), _gray(cur), None)

    return flow


def classical_methods() -> dict[str, FlowMethod]:
    """Fresh instances by name; each maps two uint8 RGB frames to float32 flow [H, W, 2]."""
    return {
        "farneback": farneback,
        "dis_fast": _dis(cv2.DISOPTICAL_FLOW_PRESET_FAST),
        "dis_medium": _dis(cv2.DISOPTICAL_FLOW_PRESET_MEDIUM),
    }
