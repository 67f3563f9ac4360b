"""Nothing let in: every /api and /ws call needs the token; sources outside the allow-list are refused with 400
before any connection is attempted (a canary listener on loopback proves no connection was made)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading

import httpx
import pytest
import websockets

from testing.media import make_video
from testing.net import HOST
from testing.server import small_server

pytestmark = [pytest.mark.realtime, pytest.mark.timeout(180)]


class Canary:
    """A loopback TCP listener that records every connection made to it."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind((HOST, 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.sock.close()


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    root = tmp_path_factory.mktemp("security")
    server = small_server(root)
    make_video(server.media_dir / "clip.mp4", frames=8)
    make_video(root / "secret.mp4", frames=8)  # a real video, but outside the media dir
    os.symlink(root / "secret.mp4", server.media_dir / "link.mp4")  # inside by name, outside by target
    (server.media_dir / "sub").mkdir(parents=True)
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def stream_id(srv):
    """A real stream, so a refusal below is about the token and never about an unknown id."""
    with srv.api() as api:
        sid = api.create({"source": "webcam", "fps": 5})["id"]
        yield sid
        api.delete(sid)


def api_operations(srv) -> list[tuple[str, str]]:
    schema = httpx.get(f"{srv.url}/openapi.json", headers={"Authorization": f"Bearer {srv.token}"}, timeout=10).json()
    ops = [
        (method.upper(), path)
        for path, item in schema["paths"].items()
        if path.startswith("/api")
        for method in item
        if method in ("get", "post", "put", "patch", "delete")
    ]
    assert len(ops) >= 5, ops  # create, list, get, delete, checkpoint at least
    return ops


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer wrong-token", "Bearer", "Basic {token}", "{token}"],
    ids=["no-header", "wrong-token", "empty-bearer", "basic-scheme", "no-scheme"],
)
def test_every_api_call_needs_the_token(srv, stream_id, authorization):
    with srv.api(token=None) as anon:
        for method, path in api_operations(srv):
            url = path.replace("{stream_id}", stream_id)
            headers = {"Authorization": authorization.format(token=srv.token)} if authorization else {}
            body = {"source": "webcam"} if method == "POST" else None
            r = anon.http.request(method, url, headers=headers, json=body)
            assert r.status_code in (401, 403), f"{method} {url} without a valid token -> {r.status_code} {r.text}"
        # ...and nothing happened: the stream is still there, no new one was made.
    with srv.api() as api:
        streams = api.http.get("/api/streams").json()
        assert [s["id"] for s in streams] == [stream_id]


@pytest.mark.parametrize("path", ["/ws/streams/{id}", "/ws/streams/{id}/ingest"])
@pytest.mark.parametrize("token", [None, "wrong-token"], ids=["no-token", "wrong-token"])
def test_every_websocket_needs_the_token(srv, stream_id, path, token):
    url = srv.ws(path.format(id=stream_id), token=token)

    async def attempt() -> tuple[int | None, list]:
        got = []
        try:
            async with websockets.connect(url, open_timeout=10) as ws:
                while len(got) < 10:  # bounded: an error frame, then the close
                    got.append(await asyncio.wait_for(ws.recv(), 10))
        except websockets.ConnectionClosed as exc:
            return (exc.rcvd.code if exc.rcvd else None), got
        except websockets.InvalidStatus as exc:
            return exc.response.status_code, got
        return None, got

    code, got = asyncio.run(attempt())
    assert code in (1008, 401, 403), f"{url}: closed with {code}, received {got}"
    assert all(isinstance(m, str) for m in got), "no frame may reach an unauthenticated viewer"
    if got:
        assert json.loads(got[-1])["type"] == "error"


def refused_sources(canary_port: int) -> dict[str, str]:
    loop = f"127.0.0.1:{canary_port}"
    return {
        "file-absolute-outside": "file:///etc/passwd",
        "file-dotdot": "file:../secret.mp4",
        "file-dotdot-nested": "file:sub/../../secret.mp4",
        "file-dotdot-encoded": "file:%2e%2e/secret.mp4",
        "file-dotdot-encoded-slash": "file:..%2fsecret.mp4",
        "file-symlink-out": "file:link.mp4",
        "file-host-form": "file://localhost/etc/passwd",
        "scheme-gopher": f"gopher://{loop}/x",
        "scheme-ftp": f"ftp://{loop}/x.mp4",
        "scheme-data": "data:video/mp4;base64,AAAA",
        "scheme-javascript": "javascript:alert(1)",
        "scheme-concat": f"concat:http://{loop}/a|http://{loop}/b",
        "scheme-subfile": "subfile,,start,0,end,0,,:/etc/passwd",
        "scheme-tcp": f"tcp://{loop}",
        "scheme-udp": f"udp://{loop}",
        "no-scheme": "/etc/passwd",
        "http-loopback": f"http://{loop}/live.ts",
        "https-loopback": f"https://{loop}/live.ts",
        "rtsp-loopback": f"rtsp://{loop}/live",
        "http-localhost": f"http://localhost:{canary_port}/live.ts",
        "http-loopback-decimal": f"http://2130706433:{canary_port}/live.ts",
        "http-loopback-v6": f"http://[::1]:{canary_port}/live.ts",
        "http-unspecified": f"http://0.0.0.0:{canary_port}/live.ts",
        "http-private-10": "http://10.0.0.1/live.ts",
        "http-private-192": "http://192.168.1.1/live.ts",
        "http-link-local-metadata": "http://169.254.169.254/latest/meta-data",
        "http-userinfo-trick": f"http://example.com@127.0.0.1:{canary_port}/live.ts",
    }


def test_bad_sources_are_refused_before_any_connection(srv):
    canary = Canary()
    try:
        with srv.api() as api:
            before = len(api.http.get("/api/streams").json())
            for label, source in refused_sources(canary.port).items():
                r = api.http.post("/api/streams", json={"source": source})
                assert r.status_code == 400, f"{label}: {source!r} -> {r.status_code} {r.text}"
                assert r.json()["detail"]["message"], f"{label}: a 400 needs a message"
            assert len(api.http.get("/api/streams").json()) == before, "a refused source must not make a stream"
    finally:
        canary.close()
    assert canary.connections == 0, "a refused source was connected to"


def test_the_media_dir_itself_is_allowed(srv):
    """The refusals above are about where a file is, not about file: sources as such."""
    with srv.api() as api:
        info = api.create({"source": "file:clip.mp4", "name": "inside", "fps": 5})
        api.delete(info["id"])


def test_malformed_bodies_get_422_with_a_message(srv):
    with srv.api() as api:
        for body in (
            {},
            {"source": ""},
            {"source": "demo", "fps": -1},
            {"source": "demo", "width": 10**9},
            {"source": "demo", "name": "../../etc/x"},
            {"source": "demo", "extra": 1},
            [],
        ):
            r = api.http.post("/api/streams", json=body)
            assert r.status_code == 422, f"{body!r} -> {r.status_code} {r.text}"
            assert r.json()["detail"]
        r = api.http.post("/api/streams", content=b"{not json", headers={"content-type": "application/json"})
        assert r.status_code == 422, r.text
