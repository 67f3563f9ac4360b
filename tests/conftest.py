"""Fixtures shared by several test modules: the engine's thread budget, and the end-to-end server."""

from pathlib import Path

import pytest
import torch
from server_support import FLAGS, TOKEN

from testing.media import make_media
from testing.server import ServerProcess


@pytest.fixture
def one_intra_op_thread():
    """CPU kernels round differently with different thread counts. The reference and every stage (a thread of
    the local runtime, a worker of the process runtime: both split this process's budget) get one thread each,
    so any difference left is the engine's arithmetic."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# The end-to-end server of test_server.py and test_server_errors.py (each module gets its own: module scope). Modules
# that need another server define their own ``server`` fixture, which wins over these.
@pytest.fixture(scope="module")
def media(tmp_path_factory) -> Path:
    return make_media(tmp_path_factory.mktemp("overtime"))


@pytest.fixture(scope="module")
def server(media):
    """Loopback sources allowed, a token, short timeouts and at most 2 streams (``server_support.FLAGS``)."""
    with ServerProcess(media.parent, *FLAGS, token=TOKEN) as srv:
        yield srv


@pytest.fixture
def no_streams_left(server):
    """Whatever a test left running (a failed assertion skips its clean-up) is deleted before the next one."""
    yield
    if server.proc is not None and server.proc.poll() is None:
        for info in server.client.get("/api/streams").json():
            server.client.delete(f"/api/streams/{info['id']}")
