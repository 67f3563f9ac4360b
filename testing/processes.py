"""What a process tree holds outside itself and must not leave behind: multiprocessing's temporary folder (removed
by a process that exits normally) and the shared memory it maps in /dev/shm (frame rings, semaphores)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from pathlib import Path

import psutil

SHM = Path("/dev/shm")


def fork_server_folder(processes: Iterable[psutil.Process]) -> Path:
    """The folder of the fork server's socket among ``processes``: multiprocessing's temporary folder of the process
    that started the fork server (the API process, or a stream's Ray actor), removed when that process exits
    normally and left behind when it is killed."""
    for proc in processes:
        with contextlib.suppress(psutil.Error):
            if "multiprocessing.forkserver" in " ".join(proc.cmdline()):
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
