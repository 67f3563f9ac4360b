"""Frames reach the learner's device as uint8 and become the floats ``frame_pair`` makes on the host (on CUDA within
one rounding: it divides by a scalar as a product with its reciprocal; seen on an H200); what leaves the learner
comes back as arrays of its own."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from models.online import frame_pair
from server.stream.learner.device_io import FrameUpload, HostCopy

ON_GPU = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
DEVICES = ["cpu", pytest.param("cuda:0", marks=ON_GPU)]


@pytest.mark.parametrize("device", DEVICES)
def test_frames_go_up_as_the_pair_the_learner_expects(device):
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 256, (2, 24, 32, 3), dtype=np.uint8)
    upload = FrameUpload(torch.device(device))
    pair = torch.cat([upload(a), upload(b)])[None]
    assert pair.device.type == torch.device(device).type and pair.dtype == torch.float32
    same = {"rtol": 0, "atol": 0} if device == "cpu" else {"rtol": 2**-23, "atol": 0}  # one float32 rounding
    torch.testing.assert_close(pair.cpu(), frame_pair(a, b), **same)
    again = upload(b)  # the staging buffer is reused once its copy has run
    torch.testing.assert_close(again.cpu(), frame_pair(b, b)[0, :3], **same)


@pytest.mark.parametrize("device", DEVICES)
def test_what_comes_back_is_the_learners_values_in_arrays_of_their_own(device):
    copy = HostCopy()
    flow = torch.arange(24.0, device=device).reshape(3, 4, 2)
    losses = torch.tensor([0.5, 0.25], device=device)
    first = copy.fetch(flow=flow, losses=losses)
    assert np.array_equal(first["flow"], flow.cpu().numpy()) and first["losses"].tolist() == [0.5, 0.25]
    flow.add_(1.0)
    second = copy.fetch(flow=flow, losses=losses)
    assert np.array_equal(second["flow"], flow.cpu().numpy())
    assert first["flow"][0, 0, 0] == 0.0  # the first frame's array did not change under it
