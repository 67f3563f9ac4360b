"""Frames through a block codec for the tests: smooth pictures, coded at the size read, and streams of them whose
encoder skips macroblocks."""

from __future__ import annotations

import cv2
import numpy as np
import torch

from models.block_codec import MACROBLOCK, round_trip
from models.online import frame_pair

H, W = 96, 128


def picture(seed: int, h: int = H, w: int = W) -> np.ndarray:
    """A smooth random texture (h, w, 3), uint8: noise blurred, with nothing that lines up with a grid."""
    smooth = cv2.GaussianBlur(np.random.default_rng(seed).random((h, w, 3)).astype(np.float32), (0, 0), 2.0)
    smooth = (smooth - smooth.min()) / (smooth.max() - smooth.min())
    return (smooth * 255).round().astype(np.uint8)


def tensor(image: np.ndarray) -> torch.Tensor:
    """(1, 3, H, W) in [0, 1] of an (H, W, 3) uint8 picture."""
    return torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1)[None].float() / 255


def opencv_jpeg(image: np.ndarray, quality: int) -> np.ndarray:
    bgr = np.ascontiguousarray(image[..., ::-1])
    return cv2.imdecode(cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, quality])[1], cv2.IMREAD_COLOR)[..., ::-1]


def coded(image: np.ndarray, quality: int = 8) -> np.ndarray:
    return (round_trip(tensor(image), quality)[0].permute(1, 2, 0).numpy() * 255).round().astype(np.uint8)


def frames(starved_grid: bool, skips: bool, count: int) -> list[np.ndarray]:
    """``count`` frames of a picture moving a pixel a frame, coded (``starved_grid``) and with every other macroblock
    column left as it was in the frame before (``skips``)."""
    base = picture(4, H, W + count)
    out = [base[:, t : t + W].copy() for t in range(count)]
    if starved_grid:
        out = [coded(f) for f in out]
    if skips:
        for before, frame in zip(out, out[1:], strict=False):
            for x in range(0, W, 2 * MACROBLOCK):
                frame[:, x : x + MACROBLOCK] = before[:, x : x + MACROBLOCK]
    return out


def stream(starved_grid: bool, skips: bool, pairs: int) -> list[torch.Tensor]:
    """The pairs (1, 6, H, W) of ``frames``."""
    made = frames(starved_grid, skips, pairs + 1)
    return [frame_pair(a, b) for a, b in zip(made, made[1:], strict=False)]
