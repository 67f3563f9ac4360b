"""When a process tree has ended, and what it holds outside itself and must not leave behind: multiprocessing's
temporary folder (removed by a process that exits normally) and the shared memory it maps in /dev/shm (frame rings,
semaphores)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable
from pathlib import Path

import psutil

SHM = Path("/dev/shm")


def running(processes: Iterable[psutil.Process]) -> list[psutil.Process]:
    """Those of ``processes`` still running. A zombie has ended: an orphan's zombie waits for init to reap it, which
    here took up to 2 s after it exited (``psutil.wait_procs`` waits for that too)."""
    alive = []
    for proc in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc)
    return alive


def outlived(processes: Iterable[psutil.Process], timeout_s: float) -> list[psutil.Process]:
    """Those of ``processes`` still ``running`` ``timeout_s`` from now, returned as soon as none is."""
    processes, deadline = list(processes), time.monotonic() + timeout_s
    while (alive := running(processes)) and time.monotonic() < deadline:
        time.sleep(0.02)
    return alive


def is_fork_server(proc: psutil.Process) -> bool:
    """Whether ``proc`` is a multiprocessing fork server."""
    with contextlib.suppress(psutil.Error):
        return "multiprocessing.forkserver" in " ".join(proc.cmdline())
    return False


def fork_server_folder(processes: Iterable[psutil.Process]) -> Path:
    """The folder of the fork server's socket among ``processes``: multiprocessing's temporary folder of the process
    that started the fork server (the API process, or a stream's Ray actor), removed when that process exits
    normally and left behind when it is killed."""
    for proc in processes:
        with contextlib.suppress(psutil.Error):
            if is_fork_server(proc):
                sockets = [c.laddr for c in proc.net_connections(kind="unix") if c.laddr]
                return Path(sockets[0]).parent
    raise AssertionError("no fork server among these processes")


def shared_memory(processes: Iterable[psutil.Process]) -> set[Path]:
    """The /dev/shm entries ``processes`` have mapped now (other processes of the machine use /dev/shm too)."""
    paths: set[Path] = set()
    for proc in processes:
        with contextlib.suppress(psutil.Error):
            paths |= {Path(m.path) for m in proc.memory_maps() if m.path.startswith(f"{SHM}/")}
    return paths
