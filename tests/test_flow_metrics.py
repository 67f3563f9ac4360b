"""Moving-region masks, F1 and per-pixel end-point errors on fields small enough to score by hand."""

import math

import numpy as np
import pytest

from models.flow_metrics import consistent_mask, end_point_errors, epe, f1_score, mask_counts, motion_mask


def field(*vectors: tuple[float, float]) -> np.ndarray:
    """A 1 × N flow field."""
    return np.array([vectors], np.float32)


def test_motion_mask_is_strictly_longer_than_half_a_pixel():
    flow = field((0.0, 0.0), (0.5, 0.0), (0.3, 0.4), (0.3, -0.5), (-3.0, 4.0))  # lengths 0, 0.5, 0.5, 0.58, 5
    assert motion_mask(flow).tolist() == [[False, False, False, True, True]]
    assert motion_mask(flow, min_motion=4.9).tolist() == [[False, False, False, False, True]]


def test_end_point_errors_by_hand():
    flow, gt = field((3.0, 0.0), (1.0, 1.0)), field((0.0, 4.0), (1.0, 1.0))
    assert end_point_errors(flow, gt).tolist() == [[5.0, 0.0]]
    assert epe(flow, gt) == 2.5
    with pytest.raises(ValueError):
        end_point_errors(field((0.0, 0.0)), gt)


def test_mask_counts_and_f1_by_hand():
    predicted = np.array([[1, 1, 1, 0, 0, 0]], bool)
    actual = np.array([[1, 1, 0, 1, 0, 0]], bool)
    tp, fp, fn = mask_counts(predicted, actual)
    assert (tp, fp, fn) == (2, 1, 1)
    assert f1_score(tp, fp, fn) == pytest.approx(2 * 2 / (2 * 2 + 1 + 1))  # precision = recall = 2/3
    assert f1_score(*mask_counts(actual, actual)) == 1.0
    assert f1_score(*mask_counts(~actual, actual)) == 0.0  # disjoint masks
    assert f1_score(*mask_counts(np.zeros_like(actual), actual)) == 0.0  # zero flow finds nothing that moves
    assert math.isnan(f1_score(0, 0, 0))  # no motion anywhere: undefined, not perfect
    with pytest.raises(ValueError):
        mask_counts(predicted, actual[:, :3])


def test_pooled_counts_weight_frames_by_their_moving_pixels():
    # Two frames: one with 1 moving pixel found, one with 3 moving pixels missed. Pooled F1 = 2·1 / (2·1 + 0 + 3).
    a = mask_counts(np.array([True]), np.array([True]))
    b = mask_counts(np.zeros(3, bool), np.ones(3, bool))
    assert f1_score(*np.add(a, b)) == pytest.approx(0.4)


def test_a_flow_is_consistent_where_the_backward_flow_leads_back_and_it_stays_in_the_frame():
    forward = np.zeros((6, 10, 2), np.float32)
    forward[:, :] = (2.0, 0.0)  # everything moves 2 px right ...
    backward = np.zeros((6, 10, 2), np.float32)
    backward[:, :] = (-2.0, 0.0)  # ... and back
    backward[:, 5] = (0.0, 0.0)  # except where column 3 lands: the backward flow stays put (an occlusion)
    backward[:, 6] = (-1.5, 0.0)  # and where column 4 lands, it leads back within half a pixel
    passed = consistent_mask(forward, backward)
    assert passed[:, 3].sum() == 0 and passed[:, 4].all()
    assert passed[:, :3].all() and passed[:, 5:8].all()
    assert not passed[:, 8:].any()  # they land outside the frame
    with pytest.raises(ValueError):
        consistent_mask(forward, backward[:, :5])
