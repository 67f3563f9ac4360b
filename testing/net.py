"""Loopback addresses and ports: everything the toolkit starts listens on 127.0.0.1 only."""

from __future__ import annotations

import socket
from typing import Any

import httpx

HOST = "127.0.0.1"


def free_port() -> int:
    """A port nothing listens on right now (the OS picks it), for a server about to start."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def http_client(base_url: str, **kwargs: Any) -> httpx.Client:
    """An HTTP client that opens a connection per request. With keep-alive, a request sent on a pooled connection in
    the instant the server closes it for idleness (uvicorn: after 5 s) fails with "Server disconnected without
    sending a response" (seen in a fresh-clone run: a test idle while a worker restarted); a loopback connection
    costs next to nothing."""
    return httpx.Client(base_url=base_url, limits=httpx.Limits(max_keepalive_connections=0), **kwargs)
