"""Loopback addresses and ports: everything the toolkit starts listens on 127.0.0.1 only."""

from __future__ import annotations

import socket

HOST = "127.0.0.1"


def free_port() -> int:
    """A port nothing listens on right now (the OS picks it), for a server about to start."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]
