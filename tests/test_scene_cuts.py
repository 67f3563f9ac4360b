"""A scene cut is found between two shots, not within one (fast pans, exposure changes), and the learner's pairs treat
the frame after it as the first of a new stream."""

from __future__ import annotations

import cv2
import numpy as np
import torch

from models.online import frame_pair, stream_pairs
from models.scene_cuts import SceneCuts
from models.streams import load_photo


def _view(photo: str, x: int, y: int = 40, size: tuple[int, int] = (160, 120)) -> np.ndarray:
    image = cv2.resize(load_photo(photo), (480, 360), interpolation=cv2.INTER_AREA)
    return np.clip(image[y : y + size[1], x : x + size[0]], 0, 255).astype(np.uint8)


def test_a_cut_between_two_photos_is_found_and_a_fast_pan_or_a_flash_is_not():
    cuts = SceneCuts()
    pan = [_view("astronaut", x) for x in range(0, 200, 40)]  # 40 px a frame
    brighter = np.clip(pan[-1].astype(np.int16) + 60, 0, 255).astype(np.uint8)  # a flash, an exposure step
    found = [cuts(frame) for frame in [*pan, brighter, _view("coffee", 100), _view("coffee", 130)]]
    assert found == [False] * 6 + [True, False]


def test_the_frame_after_a_cut_is_paired_with_itself():
    frames = [_view("astronaut", 0), _view("astronaut", 8), _view("coffee", 100), _view("coffee", 108)]
    pairs = list(stream_pairs(frames))
    assert len(pairs) == 3
    torch.testing.assert_close(pairs[0], frame_pair(frames[0], frames[1]))
    torch.testing.assert_close(pairs[1], frame_pair(frames[2], frames[2]))
    torch.testing.assert_close(pairs[2], frame_pair(frames[2], frames[3]))


def test_a_dark_noisy_camera_is_not_taken_for_a_run_of_cuts():
    """In the dark a pixel's hue is mostly sensor noise, new every frame; the histogram of many such pixels is not."""
    rng = np.random.default_rng(0)
    dark = _view("chelsea", 60).astype(np.float32) * 0.05
    cuts = SceneCuts()
    assert not any(cuts(np.clip(dark + rng.normal(0, 2, dark.shape), 0, 255).astype(np.uint8)) for _ in range(10))
