import numpy as np

from models.classical import classical_methods
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
