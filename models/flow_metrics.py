"""Flow quality: end-point error against ground truth, the moving region's F1, and the label-free measures of
the reference work (photometric error, reconstruction accuracy on moving pixels). numpy in, floats out, so
learned and classical flows are scored by the same code."""

from __future__ import annotations

import numpy as np
import torch

from .flow_loss import warp

#: L∞ thresholds of the reconstruction accuracy (Marullo et al. 2022).
RECON_THRESHOLDS = (0.05, 0.025)
#: A pixel moves when its flow is longer than this (px per frame): slower motion is within the noise of a pseudo
#: ground truth on real footage and invisible in the flow overlays.
MIN_MOTION = 0.5
#: A pixel moves fast above this (px per frame at the working size): beyond the reach of a small search at full
#: resolution, where coarse-to-fine nets that never saw such motion damp it (a hand waved at a webcam).
FAST_MOTION = 4.0
#: UnFlow's forward-backward test (Meister et al. 2018): a flow passes where the backward flow at its end leads back
#: to within this share of the two vectors' squared lengths plus this many squared pixels.
CONSISTENCY = (0.01, 0.5)


def _check(flow: np.ndarray, name: str = "flow") -> np.ndarray:
    flow = np.asarray(flow, dtype=np.float32)
    if flow.ndim != 3 or flow.shape[2] != 2:
        raise ValueError(f"{name} must be [H, W, 2], got {flow.shape}")
    return flow


def magnitude(flow: np.ndarray) -> float:
    """Mean flow magnitude in pixels."""
    return float(np.linalg.norm(_check(flow), axis=-1).mean())


def end_point_errors(flow: np.ndarray, gt: np.ndarray) -> np.ndarray:
    """Per-pixel end-point error ||flow - gt|| in pixels, [H, W]."""
    flow, gt = _check(flow), _check(gt, "gt")
    if flow.shape != gt.shape:
        raise ValueError(f"flow {flow.shape} and gt {gt.shape} differ")
    return np.linalg.norm(flow - gt, axis=-1)


def epe(flow: np.ndarray, gt: np.ndarray) -> float:
    """Mean end-point error ||flow - gt|| in pixels."""
    return float(end_point_errors(flow, gt).mean())


def motion_mask(flow: np.ndarray, min_motion: float = MIN_MOTION) -> np.ndarray:
    """Pixels whose flow is longer than ``min_motion`` px, bool [H, W]."""
    return np.linalg.norm(_check(flow), axis=-1) > min_motion


def consistent_mask(forward: np.ndarray, backward: np.ndarray) -> np.ndarray:
    """Pixels whose ``forward`` flow lands inside the frame and whose ``backward`` flow there leads back
    (``CONSISTENCY``), bool [H, W]. Why: a reference flow is only a reference where it agrees with itself; where the
    two disagree, the pixel is occluded in the other frame or one of the two flows is wrong (a fast, blurred hand
    matched twice over), and scoring against it measures the reference's error as much as the method's."""
    forward, backward = _check(forward), _check(backward, "backward")
    if forward.shape != backward.shape:
        raise ValueError(f"forward {forward.shape} and backward {backward.shape} differ")
    f = torch.from_numpy(np.ascontiguousarray(forward)).permute(2, 0, 1)[None]
    b = torch.from_numpy(np.ascontiguousarray(backward)).permute(2, 0, 1)[None]
    back = warp(b, f)[0].permute(1, 2, 0).numpy()
    share, floor = CONSISTENCY
    agree = ((forward + back) ** 2).sum(-1) < share * ((forward**2).sum(-1) + (back**2).sum(-1)) + floor
    h, w = forward.shape[:2]
    ys, xs = np.mgrid[0:h, 0:w]
    x, y = xs + forward[..., 0], ys + forward[..., 1]
    return agree & (x >= 0) & (x <= w - 1) & (y >= 0) & (y <= h - 1)


def mask_counts(predicted: np.ndarray, actual: np.ndarray) -> tuple[int, int, int]:
    """(true positives, false positives, false negatives) of a predicted bool mask against the actual one.

    Counts rather than a score, so a window of frames pools its pixels (a frame without motion adds nothing
    instead of an undefined F1)."""
    predicted, actual = np.asarray(predicted, bool), np.asarray(actual, bool)
    if predicted.shape != actual.shape:
        raise ValueError(f"masks {predicted.shape} and {actual.shape} differ")
    return int((predicted & actual).sum()), int((predicted & ~actual).sum()), int((~predicted & actual).sum())


def f1_score(tp: float, fp: float, fn: float) -> float:
    """2·TP / (2·TP + FP + FN); NaN when neither mask has a pixel (nothing to agree on)."""
    total = 2 * tp + fp + fn
    return float(2 * tp / total) if total else float("nan")


def reconstruct(prev: np.ndarray, cur: np.ndarray, flow: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(previous frame, current frame warped back by flow), both float [H, W, 3] in [0, 1]."""
    flow = _check(flow)
    t = torch.from_numpy(np.ascontiguousarray(cur, dtype=np.float32) / 255.0).permute(2, 0, 1)[None]
    f = torch.from_numpy(np.ascontiguousarray(flow)).permute(2, 0, 1)[None]
    rec = warp(t, f)[0].permute(1, 2, 0).numpy()
    return np.asarray(prev, dtype=np.float32) / 255.0, rec


def photometric_residual(prev: np.ndarray, cur: np.ndarray, flow: np.ndarray) -> np.ndarray:
    """[H, W]: |warp(current, flow) - previous| per pixel, the mean over channels, intensities in [0, 1]."""
    target, rec = reconstruct(prev, cur, flow)
    return np.abs(rec - target).mean(axis=-1)


def photometric_error(prev: np.ndarray, cur: np.ndarray, flow: np.ndarray) -> float:
    """Mean |warp(current, flow) - previous| over pixels and channels, intensities in [0, 1]."""
    return float(photometric_residual(prev, cur, flow).mean())


def reconstruction_accuracy(
    prev: np.ndarray, cur: np.ndarray, flow: np.ndarray, moving: np.ndarray, thresholds=RECON_THRESHOLDS
) -> dict[float, float]:
    """Share of ``moving`` pixels whose reconstruction error (L∞ over RGB) is below each threshold."""
    target, rec = reconstruct(prev, cur, flow)
    err = np.abs(rec - target).max(axis=-1)[np.asarray(moving, bool)]
    return {th: float((err < th).mean()) if err.size else float("nan") for th in thresholds}


def moving_mask(
    prev: np.ndarray, cur: np.ndarray, gt: np.ndarray | None = None, min_motion: float = MIN_MOTION
) -> np.ndarray:
    """Pixels that move: |gt| > min_motion when ground truth exists, else a visible intensity change."""
    if gt is not None:
        return motion_mask(gt, min_motion)
    diff = np.abs(np.asarray(cur, np.float32) - np.asarray(prev, np.float32)).max(axis=-1) / 255.0
    return diff > RECON_THRESHOLDS[1]
