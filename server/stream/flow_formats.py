"""A flow field [H, W, 2] (u, v in pixels) in the formats flow toolkits read.

- KITTI's 16-bit PNG (``flow16``): red = u, green = v, each stored as u * 64 + 2^15 in 16 bits, blue = 1 where the
  vector is valid. Lossless at 1/64 px for |u|, |v| < 512, and any PNG library reads it.
- Middlebury's ``.flo`` (``flo``): ``PIEH``, width and height as int32, then u, v interleaved as float32 (little
  endian): the exact numbers; OpenCV reads it with ``cv2.readOpticalFlow``.
"""

from __future__ import annotations

import cv2
import numpy as np

FLO_TAG = b"PIEH"
KITTI_SCALE, KITTI_OFFSET = 64.0, 2.0**15


def kitti_png(flow: np.ndarray) -> bytes:
    flow = np.asarray(flow, np.float64)
    valid = np.isfinite(flow).all(axis=2)
    coded = np.clip(np.rint(np.where(valid[..., None], flow, 0.0) * KITTI_SCALE + KITTI_OFFSET), 0, 2**16 - 1)
    bgr = np.dstack([valid, coded[..., 1], coded[..., 0]]).astype(np.uint16)  # OpenCV writes B, G, R
    ok, data = cv2.imencode(".png", bgr)
    if not ok:
        raise RuntimeError("PNG encoding failed")
    return data.tobytes()


def read_kitti_png(data: bytes) -> tuple[np.ndarray, np.ndarray]:
    """The flow (float32 [H, W, 2]) and its validity (bool [H, W]) from KITTI PNG bytes."""
    bgr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
    if bgr is None or bgr.dtype != np.uint16 or bgr.ndim != 3:
        raise ValueError("not a 16-bit KITTI flow PNG")
    flow = (bgr[..., [2, 1]].astype(np.float32) - KITTI_OFFSET) / KITTI_SCALE
    return flow, bgr[..., 0] > 0


def flo_bytes(flow: np.ndarray) -> bytes:
    flow = np.asarray(flow, "<f4")
    height, width = flow.shape[:2]
    return FLO_TAG + np.array([width, height], "<i4").tobytes() + np.ascontiguousarray(flow).tobytes()


def read_flo(data: bytes) -> np.ndarray:
    if data[:4] != FLO_TAG or len(data) < 12:
        raise ValueError("not a Middlebury .flo file")
    width, height = np.frombuffer(data, "<i4", 2, 4)
    return np.frombuffer(data, "<f4", offset=12).reshape(height, width, 2).copy()
