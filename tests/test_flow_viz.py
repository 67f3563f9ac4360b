import numpy as np
import pytest

from models.flow_viz import ColorTable, color_wheel_legend, flow_to_color


def test_zero_flow_is_white_and_shape_dtype():
    img = flow_to_color(np.zeros((5, 7, 2), np.float32))
    assert img.shape == (5, 7, 3) and img.dtype == np.uint8 and (img == 255).all()


def test_directions_have_wheel_colours_and_magnitude_saturates():
    flow = np.array([[[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.5, 0.0]]], np.float32)
    img = flow_to_color(flow, max_magnitude=1.0).astype(int)
    right, left, down, half = img[0]
    assert right[0] > 200 and right[1] < 60 and right[2] < 60  # +u is red (Middlebury)
    assert left[2] > 200 and left[0] < 60  # -u is cyan-blue
    assert not np.array_equal(down, right)
    assert (half >= right).all() and (half > right).any()  # half the speed: paler


def test_non_finite_and_bad_shapes():
    flow = np.zeros((2, 2, 2), np.float32)
    flow[0, 0] = np.nan
    assert (flow_to_color(flow)[0, 0] == 0).all()
    with pytest.raises(ValueError):
        flow_to_color(np.zeros((4, 4)))


def test_legend():
    legend = color_wheel_legend(33)
    assert legend.shape == (33, 33, 3) and (legend[16, 16] == 255).all() and (legend[0, 0] == 255).all()
    assert len({tuple(c) for c in legend.reshape(-1, 3)}) > 100


def test_color_table_matches_flow_to_color():
    rng = np.random.default_rng(0)
    flow = rng.normal(0, 2, (48, 64, 2)).astype(np.float32)
    flow[0, 0] = np.nan
    table = ColorTable()
    diff = np.abs(table(flow, 3.0).astype(int) - flow_to_color(flow, max_magnitude=3.0).astype(int))
    assert np.percentile(diff, 99.5) <= 1 and diff.mean() < 0.2
    assert (table(np.zeros((4, 4, 2), np.float32), 1.0) == 255).all()
