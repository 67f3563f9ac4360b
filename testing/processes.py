"""Where a process tree keeps multiprocessing's temporary folder: what a process that exits normally removes."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from pathlib import Path

import psutil


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
