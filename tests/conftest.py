"""Fixtures shared by the engine's tests."""

import pytest
import torch


@pytest.fixture
def one_intra_op_thread():
    """CPU kernels round differently with different thread counts. The reference and every stage (a thread of
    the local runtime, a worker of the process runtime: both split this process's budget) get one thread each,
    so any difference left is the engine's arithmetic."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
