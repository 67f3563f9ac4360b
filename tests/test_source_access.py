"""A source's server that refuses access, where FFmpeg makes the connection itself (RTSP): the stream's error says
what to do, is final (a camera locks an account after a few wrong passwords), and the server's log does not get the
password either. The same over HTTP, through the service: ``tests/test_server_errors.py``."""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Iterator

import pytest

from server import errors
from server.errors import SourceError
from server.stream.restart_policy import Outcome, judge
from server.stream.source.opening import open_container
from server.stream.source.sources import AddressPolicy, SourceSpec


@pytest.fixture(params=["401 Unauthorized", "403 Forbidden"])
def refusing_camera(request) -> Iterator[tuple[str, str]]:
    """An RTSP server on loopback that answers every request with ``status``; its address and the status."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def answer(connection: socket.socket) -> None:
        with connection, connection.makefile("rb") as requests:
            while lines := list(iter(lambda: requests.readline().strip(), b"")):
                cseq = next(line.split(b":")[1].strip() for line in lines if line.lower().startswith(b"cseq"))
                connection.sendall(
                    b'RTSP/1.0 %s\r\nCSeq: %s\r\nWWW-Authenticate: Basic realm="camera"\r\n\r\n'
                    % (request.param.encode(), cseq)
                )

    def serve() -> None:
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=answer, args=(connection,), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"127.0.0.1:{listener.getsockname()[1]}", request.param
    stop.set()
    thread.join(2)
    listener.close()


def opening(url: str) -> SourceError:
    spec = SourceSpec("rtsp", url, live=True, host="127.0.0.1", policy=AddressPolicy(allow_all=True))
    with pytest.raises(SourceError) as refused:
        open_container(spec, (5.0, 5.0), None).close()
    return refused.value


def test_a_camera_refusing_access_says_what_to_do_and_is_not_tried_again(refusing_camera, caplog):
    address, status = refusing_camera
    caplog.set_level(logging.WARNING)
    without, wrong = opening(f"rtsp://{address}/stream"), opening(f"rtsp://admin:s3cret@{address}/stream")
    assert without.code == wrong.code == errors.ACCESS_DENIED
    if status.startswith("401"):
        assert "asks for a user name and password" in without.message and "USER:PASSWORD@" in without.message
        assert "refused the user name and password" in wrong.message
    else:
        assert without.message == wrong.message == "the server refuses access to the source (403 forbidden)"
    assert not judge(Outcome("decoder", wrong.code, wrong.message), live=True).retry
    assert "admin:***@" in caplog.text and "s3cret" not in caplog.text
