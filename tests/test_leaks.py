"""Nothing left in /dev/shm: a generation's queues (POSIX semaphores, ``sem.*``) and its frame ring (``psm_*``) are
released when it stops (its stream deleted, its worker restarted, the server stopped with SIGTERM), and the
resource tracker finds nothing leaked at shutdown. Nor in /tmp: the server stopped with SIGTERM exits normally, which
removes multiprocessing's temporary folder (the fork server's socket). Nor a process: a killed worker's pipeline
stages (processes of its own on CPU) end with it.

Other processes on the machine use /dev/shm as well, so only the entries this server's processes map count: they
are sampled while each generation runs, then must disappear.
"""

from __future__ import annotations

import os
import signal

import psutil
import pytest

from testing.api import Api
from testing.media import make_video
from testing.poll import until
from testing.processes import SHM, fork_server_folder, running, shared_memory
from testing.server import ServerProcess, small_server

pytestmark = [pytest.mark.realtime, pytest.mark.slow, pytest.mark.timeout(300)]


def mapped_shm(server: ServerProcess) -> set[str]:
    """The /dev/shm entries the server's processes (API, decoders, workers) have mapped now."""
    return {path.name for path in shared_memory(server.processes())}


def generation(server: ServerProcess, api: Api, sid: str, old: set[str]) -> set[str]:
    """The entries of the stream's running generation: mapped once it processes frames, and not seen before."""
    api.wait_processed(sid, api.get(sid)["counters"]["processed"] + 5, 120)
    names = mapped_shm(server) - old
    assert any(n.startswith("sem.") for n in names) and any(n.startswith("psm_") for n in names), names
    return names


def left(names: set[str]) -> list[str]:
    return sorted(n for n in names if (SHM / n).exists())


def released(names: set[str], what: str) -> None:
    try:
        until(lambda: not left(names), 30, f"{what} released")
    except TimeoutError:
        raise AssertionError(f"{what} left {left(names)} in /dev/shm") from None


def test_start_restart_delete_stop_leaves_nothing_behind(tmp_path):
    server = small_server(tmp_path)
    make_video(server.media_dir / "clip.mp4", frames=60)
    server.start()
    try:
        with server.api() as api:
            seen = mapped_shm(server)
            sid = api.create({"source": "file:clip.mp4", "name": "leaks", "fps": 15, "loop": True})["id"]
            first = generation(server, api, sid, seen)
            worker = api.get(sid)["pids"]["worker"]
            stages = psutil.Process(worker).children()
            assert len(stages) == api.get(sid)["stages"], "one process per pipeline stage on CPU"
            os.kill(worker, signal.SIGKILL)  # a crashed worker: its whole generation is replaced
            api.wait(sid, 60, "a new worker", lambda s: s["pids"]["worker"] not in (None, worker))
            until(lambda: not running(stages), 30, "the killed worker's stage processes ended")
            second = generation(server, api, sid, seen | first)
            released(first, "the generation of the killed worker")
            api.delete(sid)
            released(second, "the deleted stream's generation")
            sid = api.create({"source": "file:clip.mp4", "name": "leaks", "fps": 15, "loop": True})["id"]
            third = generation(server, api, sid, seen | first | second)
            scratch = fork_server_folder(server.processes())
    finally:
        code = server.stop()  # SIGTERM with the stream running; waits for every process of the tree, the tracker too
    assert not left(seen | third), f"the stopped server left {left(seen | third)} in /dev/shm"
    assert code == 0, f"the server stopped by SIGTERM exited with {code}"
    assert not scratch.exists(), f"the stopped server left its temporary folder {scratch}"
    assert "leaked" not in server.log_tail(100_000), server.log_tail()
