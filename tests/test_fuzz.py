"""Fuzzing the running server: schemathesis against the OpenAPI schema of /api finds no 5xx, and malformed webcam
ingest (not JPEG, oversized, text, floods) gets an error message and a closed socket, never a crash."""

from __future__ import annotations

import asyncio
import json

import pytest
import schemathesis
import websockets
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error

from testing.server import ServerProcess, small_server

pytestmark = [pytest.mark.realtime, pytest.mark.timeout(240)]
EXAMPLES = 40  # per operation: enough to cover every field's edges, cheap enough for CI


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    server = small_server(tmp_path_factory.mktemp("fuzz"), settings={"OVERTIME_MAX_STREAMS": "2"})
    server.start()
    yield server
    assert server.proc.poll() is None, "the server died under fuzzing"
    server.stop()


def api_operations(srv: ServerProcess) -> list:
    auth = {"Authorization": f"Bearer {srv.token}"}
    schema = schemathesis.openapi.from_url(f"{srv.url}/openapi.json", headers=auth, timeout=10)
    return [result.ok() for result in schema.include(path_regex="^/api/").get_all_operations()]


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=["valid", "invalid"])
def test_api_has_no_5xx(srv, mode):
    """Every /api operation, with bodies and path parameters generated from its schema (valid ones, then ones that
    break it): never a server error. (schemathesis' strategies driven by hypothesis directly; its pytest plugin
    does not support this pytest.)"""
    operations = api_operations(srv)
    assert len(operations) >= 5
    auth = {"Authorization": f"Bearer {srv.token}"}
    fuzzed = []
    with srv.api() as api:
        for operation in operations:

            @given(case=operation.as_strategy(generation_mode=mode))
            @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
            def never_5xx(case):
                response = case.call(base_url=srv.url, headers=auth, timeout=30)
                try:
                    case.validate_response(response, checks=[not_a_server_error])
                finally:  # whatever a case created goes again, so the fuzzer never hits the stream limit by accident
                    for s in api.http.get("/api/streams").json():
                        api.delete(s["id"])

            try:
                never_5xx()
                fuzzed.append(f"{operation.method.upper()} {operation.path}")
            except Unsatisfiable:  # nothing in this operation can be made invalid (no body, no constrained params)
                assert mode is GenerationMode.NEGATIVE, operation.label
    assert "POST /api/streams" in fuzzed, fuzzed


@pytest.fixture(scope="module")
def webcam(srv):
    with srv.api() as api:
        sid = api.create({"source": "webcam", "name": "fuzz-webcam", "fps": 5})["id"]
        yield sid
        api.delete(sid)


def jpeg(size: int = 64) -> bytes:
    import cv2
    import numpy as np

    image = np.random.default_rng(0).integers(0, 255, (size, size, 3), np.uint8)
    return cv2.imencode(".jpg", image)[1].tobytes()


async def push(url: str, messages: list, read_s: float = 10.0) -> tuple[int | None, list]:
    """Send ``messages`` (bytes or str) as fast as possible; return the close code and what the server said."""
    said: list = []
    try:
        async with websockets.connect(url, open_timeout=10, max_size=2**20) as ws:
            for m in messages:
                await ws.send(m)
            deadline = asyncio.get_running_loop().time() + read_s
            while (left := deadline - asyncio.get_running_loop().time()) > 0:
                said.append(await asyncio.wait_for(ws.recv(), left))
    except websockets.ConnectionClosed as exc:
        return (exc.rcvd.code if exc.rcvd else None), said
    except TimeoutError:
        return None, said
    return None, said


def errors_in(said: list) -> list[dict]:
    return [m for m in (json.loads(x) for x in said if isinstance(x, str)) if m.get("type") == "error"]


@pytest.mark.parametrize(
    "label, messages, close_codes",
    [
        ("not-jpeg", [b"\x00\x01garbage" * 100], (1003, 1007, 1008)),
        ("truncated-jpeg", [jpeg()[:200]], (1003, 1007, 1008)),
        ("text-frame", ["not a frame"], (1003, 1008)),
        ("oversized", [b"\xff\xd8\xff" + b"\0" * (5 * 2**20) + b"\xff\xd9"], (1009,)),
        ("beyond-the-protocol-limit", [b"\0" * (20 * 2**20)], (1009,)),
        ("flood", [jpeg()] * 2000, (1008, 1013)),
    ],
)
def test_malformed_ingest_gets_an_error_and_a_close(srv, webcam, label, messages, close_codes):
    url = srv.ws(f"/ws/streams/{webcam}/ingest")
    code, said = asyncio.run(push(url, messages))
    assert code in close_codes, f"{label}: closed with {code}; server said {said[:3]}"
    if label != "beyond-the-protocol-limit":  # that one the WebSocket layer closes itself, before the app sees it
        assert errors_in(said), f"{label}: no error message before the close: {said[:3]}"
    with srv.api() as api:
        assert api.http.get("/healthz").status_code == 200
        assert api.get(webcam)["state"] != "error" or label != "flood"


def test_good_ingest_still_works_after_the_abuse(srv, webcam):
    """The webcam stream learns from well-formed frames sent at its own pace after all of the above (it may first
    have to come back from the stall the abuse left it in)."""
    url = srv.ws(f"/ws/streams/{webcam}/ingest")
    with srv.api() as api:
        before = api.get(webcam)["counters"]["processed"]

        async def steady() -> int:
            async with websockets.connect(url, open_timeout=10) as ws:
                for i in range(450):  # 90 s at 5 fps at most
                    await ws.send(jpeg())
                    await asyncio.sleep(0.2)
                    if i % 10 == 9 and api.get(webcam)["counters"]["processed"] >= before + 5:
                        return i + 1
            return -1

        sent = asyncio.run(steady())
        assert sent > 0, f"no frames learned after 90 s of good frames: {api.get(webcam)}"
