"""Raw flow out: KITTI's 16-bit PNG and Middlebury's .flo give back the vectors (exactly, or to KITTI's 1/64 px), and
other toolkits read them (OpenCV's own .flo reader, any 16-bit PNG decoder)."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from server.stream.flow_formats import flo_bytes, kitti_png, read_flo, read_kitti_png
from server.stream.pictures import FramePictures


@pytest.fixture
def flow() -> np.ndarray:
    return np.random.default_rng(0).normal(0, 6, (30, 40, 2)).astype(np.float32)


def test_flo_round_trips_the_exact_vectors_and_opencv_reads_it(flow, tmp_path):
    data = flo_bytes(flow)
    assert np.array_equal(read_flo(data), flow)
    path = tmp_path / "f.flo"
    path.write_bytes(data)
    assert np.array_equal(cv2.readOpticalFlow(str(path)), flow)
    cv2.writeOpticalFlow(str(tmp_path / "cv.flo"), flow)
    assert (tmp_path / "cv.flo").read_bytes() == data  # byte for byte what OpenCV writes


def test_kitti_png_round_trips_at_a_64th_of_a_pixel(flow):
    on_grid = np.rint(flow * 64) / 64  # what KITTI can store
    decoded, valid = read_kitti_png(kitti_png(on_grid))
    assert np.array_equal(decoded, on_grid) and valid.all()
    decoded, _ = read_kitti_png(kitti_png(flow))
    assert np.abs(decoded - flow).max() <= 1 / 128 + 1e-6
    raw = cv2.imdecode(np.frombuffer(kitti_png(flow), np.uint8), cv2.IMREAD_UNCHANGED)
    assert raw.dtype == np.uint16 and raw.shape == (30, 40, 3)
    u = (raw[..., 2].astype(np.float64) - 2**15) / 64  # KITTI's devkit: red is u
    assert np.abs(u - flow[..., 0]).max() <= 1 / 128 + 1e-6


def test_non_finite_vectors_are_marked_invalid(flow):
    flow[3, 4] = np.nan
    decoded, valid = read_kitti_png(kitti_png(flow))
    assert not valid[3, 4] and valid.sum() == valid.size - 1


def test_frame_pictures_encode_the_field_once_on_demand(flow):
    pictures = FramePictures({"frame": b"jpeg"}, flow)
    assert pictures.get("frame") == b"jpeg" and pictures.get("flow") is None  # not rendered: nobody wanted it
    first = pictures.get("flo")
    assert first is pictures.get("flo") and np.array_equal(read_flo(first), flow)
    assert np.abs(read_kitti_png(pictures.get("flow16"))[0] - flow).max() <= 1 / 128 + 1e-6


def test_not_flow():
    with pytest.raises(ValueError):
        read_flo(b"nope")
    with pytest.raises(ValueError):
        read_kitti_png(cv2.imencode(".png", np.zeros((4, 4, 3), np.uint8))[1].tobytes())
