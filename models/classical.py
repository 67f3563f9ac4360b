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
    return _dis_engine(cv2.DISOpticalFlow_create(preset))


def _dis_engine(engine: cv2.DISOpticalFlow) -> FlowMethod:
    def flow(prev: np.ndarray, cur: np.ndarray) -> np.ndarray:
        return engine.calc(_gray(prev), _gray(cur), None)

    return flow


#: Variational refinement of the pseudo ground truth (OpenCV's MEDIUM preset values, set explicitly: an OpenCV
#: release that changed the preset would otherwise silently change the reference every real-footage score uses).
REFINEMENT = {"iterations": 5, "alpha": 20.0, "delta": 5.0, "gamma": 10.0}


def dis_refined() -> FlowMethod:
    """DIS, MEDIUM preset, with variational refinement: the pseudo ground truth for real footage, where no true
    flow exists. Computed at the source's full resolution, where it is most accurate, then ``resize_flow``."""
    engine = cv2.DISOpticalFlow_create(cv2.DISOPTICAL_FLOW_PRESET_MEDIUM)
    engine.setVariationalRefinementIterations(REFINEMENT["iterations"])
    engine.setVariationalRefinementAlpha(REFINEMENT["alpha"])
    engine.setVariationalRefinementDelta(REFINEMENT["delta"])
    engine.setVariationalRefinementGamma(REFINEMENT["gamma"])
    return _dis_engine(engine)


def resize_flow(flow: np.ndarray, width: int, height: int) -> np.ndarray:
    """A flow field [H, W, 2] at width × height: area-averaged vectors, u scaled by width / W and v by height / H
    (a displacement of 4 px at 640 wide is 1 px at 160)."""
    flow = np.asarray(flow, np.float32)
    if flow.ndim != 3 or flow.shape[2] != 2:
        raise ValueError(f"flow must be [H, W, 2], got {flow.shape}")
    scale = np.array([width / flow.shape[1], height / flow.shape[0]], np.float32)
    return cv2.resize(flow, (width, height), interpolation=cv2.INTER_AREA) * scale


def classical_methods() -> dict[str, FlowMethod]:
    """Fresh instances by name; each maps two uint8 RGB frames to float32 flow [H, W, 2]."""
    return {
        "farneback": farneback,
        "dis_fast": _dis(cv2.DISOPTICAL_FLOW_PRESET_FAST),
        "dis_medium": _dis(cv2.DISOPTICAL_FLOW_PRESET_MEDIUM),
    }
