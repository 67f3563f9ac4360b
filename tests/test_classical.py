import numpy as np
import pytest

from models.classical import classical_methods, dis_refined, resize_flow
from models.flow_metrics import epe, magnitude, moving_mask, photometric_error, reconstruction_accuracy
from models.streams import generate


def test_classical_methods_beat_zero_flow_and_metrics_agree():
    stream = generate(size=64, frames=6, seed=4, photo="chelsea")
    zero = np.zeros_like(stream.flow[0])
    for name, method in classical_methods().items():
        errs, zeros, photo, photo0 = [], [], [], []
        for t in range(5):
            a, b, gt = stream.frames[t], stream.frames[t + 1], stream.flow[t]
            flow = method(a, b)
            assert flow.shape == gt.shape, name
            errs.append(epe(flow, gt))
            zeros.append(epe(zero, gt))
            photo.append(photometric_error(a, b, flow))
            photo0.append(photometric_error(a, b, zero))
        assert np.mean(errs) < 0.6 * np.mean(zeros), name
        assert np.mean(photo) < np.mean(photo0), name


def test_metrics_on_ground_truth():
    stream = generate(size=64, frames=2, seed=0)
    a, b, gt = stream.frames[0], stream.frames[1], stream.flow[0]
    assert epe(gt, gt) == 0.0 and abs(magnitude(gt) - np.linalg.norm(gt, axis=-1).mean()) < 1e-6
    moving = moving_mask(a, b, gt)
    good = reconstruction_accuracy(a, b, gt, moving)
    bad = reconstruction_accuracy(a, b, np.zeros_like(gt), moving)
    assert set(good) == {0.05, 0.025} and good[0.05] > 0.8 and good[0.05] > bad[0.05] and good[0.025] > bad[0.025]


def test_resize_flow_scales_each_axis():
    flow = np.zeros((48, 64, 2), np.float32)
    flow[..., 0], flow[..., 1] = 2.0, 3.0
    small = resize_flow(flow, 32, 12)
    assert small.shape == (12, 32, 2) and small.dtype == np.float32
    assert np.allclose(small[..., 0], 1.0) and np.allclose(small[..., 1], 0.75)  # u × 32/64, v × 12/48
    ramp = np.zeros((4, 8, 2), np.float32)
    ramp[..., 0] = np.arange(8, dtype=np.float32)  # u = x: area-averaged pairs (0,1), (2,3), ... then halved
    assert np.allclose(resize_flow(ramp, 4, 4)[0, :, 0], [0.25, 1.25, 2.25, 3.25])
    with pytest.raises(ValueError):
        resize_flow(np.zeros((4, 8)), 2, 2)


def test_refined_dis_is_the_medium_preset_and_beats_fast_dis():
    stream = generate(size=128, frames=5, seed=4, photo="chelsea")
    methods, refined = classical_methods(), dis_refined()
    pairs = [(stream.frames[t], stream.frames[t + 1], stream.flow[t]) for t in range(4)]
    flows = [refined(a, b) for a, b, _ in pairs]
    assert all(np.array_equal(f, methods["dis_medium"](a, b)) for f, (a, b, _) in zip(flows, pairs, strict=True))
    fast = [epe(methods["dis_fast"](a, b), gt) for a, b, gt in pairs]
    assert np.mean([epe(f, gt) for f, (_, _, gt) in zip(flows, pairs, strict=True)]) < np.mean(fast)
