"""pipeline_core.transport (CPU): messages are private copies, a receive waits with a timeout, and a
failed stage wakes every waiting one instead of leaving it hanging."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from pipeline_core import PipelineError
from pipeline_core.transport import LocalTransport

CPU = torch.device("cpu")


def transport(timeout: float = 5.0) -> LocalTransport:
    return LocalTransport([CPU, CPU], None, slots=2, timeout=timeout)


def test_a_message_is_a_copy_taken_once():
    t, x = transport(), torch.ones(3)
    t.send("act", 1, 0, x)
    x.add_(1.0)  # the sender may reuse its buffer at once
    assert t.ready("act", 1, 0) and not t.ready("act", 0, 0)
    assert torch.equal(t.recv("act", 1, 0), torch.ones(3))
    assert not t.ready("act", 1, 0)


def test_a_host_delivery_is_a_copy_too():
    t, x = transport(), torch.ones(2)
    t.deliver("input", 0, 5, x)
    x.zero_()
    assert torch.equal(t.recv("input", 0, 5), torch.ones(2))


def test_a_receive_waits_for_the_send():
    t = transport()
    threading.Timer(0.05, lambda: t.send("grad", 0, 2, torch.full((2,), 7.0))).start()
    assert torch.equal(t.recv("grad", 0, 2), torch.full((2,), 7.0))


def test_a_message_that_never_comes_is_an_error_naming_it():
    with pytest.raises(PipelineError, match=r"stage 1 waited 0s for act of frame 4, which never came"):
        transport(timeout=0.05).recv("act", 1, 4)


def test_abort_wakes_a_waiting_stage_and_clear_resets():
    t = transport(timeout=30.0)
    threading.Timer(0.05, lambda: t.abort(RuntimeError("boom"))).start()
    start = time.monotonic()
    with pytest.raises(PipelineError, match="stage 1 stopped waiting for act of frame 0") as err:
        t.recv("act", 1, 0)
    assert time.monotonic() - start < 10
    assert isinstance(err.value.__cause__, RuntimeError)
    t.send("act", 1, 0, torch.zeros(1))
    t.clear()
    assert not t.ready("act", 1, 0)
    t.send("act", 1, 1, torch.zeros(1))  # usable again after clear
    assert t.ready("act", 1, 1)
