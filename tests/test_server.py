"""The streaming service end to end: a real ``overtime serve`` in a subprocess on 127.0.0.1.

One server (loopback sources allowed, a token, short timeouts) is shared by the tests in this file; the last
test restarts it to show that a stream of the same name resumes its weights.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import cv2
import numpy as np
import pytest
import websockets

from models.streams import generate, write_mp4
from server.launch import ServerProcess, free_port

pytestmark = pytest.mark.slow
TOKEN = "test-token"
SIZE = 64
LOOP = 30  # frames of loop.mp4: a window of LOOP consecutive frames shows every frame of it once
FLAGS = (
    "--no-demo-stream",
    "--allow-private",
    "--checkpoint-interval-s",
    "3",
    "--read-timeout-s",
    "2",
    "--open-timeout-s",
    "3",
    "--reconnect-max-s",
    "2",
    "--max-streams",
    "2",
    "--stages",
    "2",
    "--width",
    "64",
    "--height",
    "64",
)


@pytest.fixture(scope="module")
def media(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("overtime")
    media = work / "media"
    media.mkdir()
    frames = generate(SIZE, 300, seed=1).frames
    write_mp4(frames, media / "clip.mp4", fps=15)  # the streams run at 15 fps: every frame pair has the same time step
    write_mp4(frames[:LOOP], media / "loop.mp4", fps=15)
    write_mp4(frames[:20], media / "short.mp4", fps=25)
    (media / "notes.mp4").write_text("this is not a video\n" * 50)
    data = (media / "clip.mp4").read_bytes()
    (media / "truncated.mp4").write_bytes(data[: len(data) // 2])
    write_mp4(frames[:40], work / "a.ts", fps=25)
    big = np.stack([cv2.resize(f, (96, 96)) for f in frames[40:80]])
    write_mp4(big, work / "b.ts", fps=25)
    (media / "resized.ts").write_bytes((work / "a.ts").read_bytes() + (work / "b.ts").read_bytes())
    return media


@pytest.fixture(scope="module")
def server(media):
    with ServerProcess(media.parent, *FLAGS, token=TOKEN) as srv:
        yield srv


@pytest.fixture(autouse=True)
def no_streams_left(request):
    """Whatever a test leaves running (a failed assertion skips its clean-up) is deleted before the next one."""
    yield
    if "server" in request.fixturenames:
        srv = request.getfixturevalue("server")
        if srv.proc is not None and srv.proc.poll() is None:
            for info in srv.client.get("/api/streams").json():
                srv.client.delete(f"/api/streams/{info['id']}")


def create(srv: ServerProcess, **body) -> dict:
    r = srv.client.post("/api/streams", json=body)
    assert r.status_code == 201, r.text
    return r.json()


def delete(srv: ServerProcess, sid: str) -> None:
    assert srv.client.delete(f"/api/streams/{sid}").status_code == 204


def watch(srv: ServerProcess, sid: str, frames: int, timeout_s: float = 90.0) -> list[tuple[dict, bytes]]:
    """Collect ``frames`` (JSON, JPEG) pairs from the stream's WebSocket."""

    async def run() -> list[tuple[dict, bytes]]:
        got: list[tuple[dict, bytes]] = []
        async with websockets.connect(srv.ws(f"/ws/streams/{sid}"), max_size=2**22) as ws:
            async with asyncio.timeout(timeout_s):
                while len(got) < frames:
                    message = json.loads(await ws.recv())
                    if message["type"] == "frame":
                        got.append((message, await ws.recv()))
        return got

    return asyncio.run(run())


def watch_images(srv: ServerProcess, sid: str, images: str) -> tuple[dict, list[bytes]]:
    """One frame from ``/ws/streams/{sid}?images=...``: its JSON and the images that follow it (or the error)."""

    async def run() -> tuple[dict, list[bytes]]:
        async with websockets.connect(srv.ws(f"/ws/streams/{sid}?images={images}"), max_size=2**22) as ws:
            async with asyncio.timeout(60):
                while (message := json.loads(await ws.recv()))["type"] not in ("frame", "error"):
                    pass
                count = len(message.get("images", [])) if message["type"] == "frame" else 0
                return message, [await ws.recv() for _ in range(count)]

    return asyncio.run(run())


def decode(jpeg: bytes) -> np.ndarray:
    return cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR).astype(np.float32)


def metric(text: str, name: str, **labels: str) -> float:
    """Sum of the samples of ``name`` whose labels include ``labels``."""
    total, found = 0.0, False
    for line in text.splitlines():
        named = line.startswith(name + "{") or line.startswith(name + " ")
        if named and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
            found = True
    assert found, f"{name}{labels} not in /metrics"
    return total


def loss_falls(frames: list[tuple[dict, bytes]]) -> tuple[float, float]:
    """Median loss of the first and the last LOOP frames of a looping loop.mp4 stream.

    Each window holds every frame pair of the loop once, so both see the same content and differ only
    in the weights (a frame's loss depends on how much it moves: first vs last frames of a clip would
    compare motion, not learning). Medians: the loop's wrap-around is one outlier pair."""
    losses = [m["loss"] for m, _ in frames]
    assert len(losses) >= 2 * LOOP
    return float(np.median(losses[:LOOP])), float(np.median(losses[-LOOP:]))


# -- learning on a file, metrics, recovery ---------------------------------------------------------
def test_file_stream_learns_and_recovers(server):
    info = create(server, source="file:loop.mp4", name="clip", fps=15, loop=True)
    sid = info["id"]
    frames = watch(server, sid, 3 * LOOP)
    first, last = loss_falls(frames)
    assert last < 0.9 * first, f"loss did not trend down: {[round(m['loss'], 3) for m, _ in frames]}"
    untrained = np.median([m["loss"] for m, _ in frames[:5]])
    meta, jpeg = frames[-1]
    assert set(meta) >= {"frame", "loss", "dp_s", "ds_s", "stage_dp_s", "latency_s", "dropped"}
    assert meta["ds_s"] == pytest.approx(1 / 15) and len(meta["stage_dp_s"]) == 2
    assert 0 < meta["latency_s"] < 5 and meta["dp_s"] > 0
    image = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)
    assert image.shape == (SIZE, SIZE, 3)
    assert [m["frame"] for m, _ in frames] == sorted(m["frame"] for m, _ in frames)

    text = server.metrics()
    assert metric(text, "overtime_frames_total", stream=sid, outcome="processed") >= 60
    assert metric(text, "overtime_frames_total", stream=sid, outcome="decoded") >= 60
    assert metric(text, "overtime_step_seconds_count", stream=sid) >= 60
    assert metric(text, "overtime_stage_step_seconds_count", stream=sid, stage="1") >= 60
    assert metric(text, "overtime_latency_seconds_count", stream=sid) >= 60
    assert metric(text, "overtime_frame_interval_seconds", stream=sid) == pytest.approx(1 / 15)
    assert metric(text, "overtime_budget_ratio", stream=sid) > 0
    assert metric(text, "overtime_loss", stream=sid) > 0
    assert metric(text, "overtime_streams", state="running") == 1, server.client.get("/api/streams").text
    for name in ("overtime_source_reconnects_total", "overtime_ws_clients", "overtime_ws_dropped_total"):
        metric(text, name, stream=sid)

    # Viewers that blend themselves ask for the frame and the flow picture apart; the overlay is their mix.
    message, jpegs = watch_images(server, sid, "frame,flow,overlay")
    assert message["images"] == ["frame", "flow", "overlay"] and len(jpegs) == 3
    frame, flow, overlay = map(decode, jpegs)
    assert frame.shape == flow.shape == overlay.shape == (SIZE, SIZE, 3)
    assert np.abs((frame + flow) / 2 - overlay).mean() < 6 < np.abs(frame - flow).mean()
    message, _ = watch_images(server, sid, "frame,nope")
    assert message["type"] == "error" and message["code"] == "bad_request"

    saved = server.client.post(f"/api/streams/{sid}/checkpoint")
    assert saved.status_code == 200, saved.text
    assert saved.json()["frames"] > 0
    download = server.client.get(saved.json()["url"])  # what the browser's checkpoint button downloads
    assert download.status_code == 200 and download.content == (server.workdir / "checkpoints" / "clip.pt").read_bytes()

    # Kill the decoder: the stream reconnects and keeps learning.
    os.kill(server.stream(sid)["pids"]["decoder"], signal.SIGKILL)
    info = server.wait_for(sid, lambda i: i["counters"]["reconnects"] >= 1, what="a reconnect")
    assert info["error"] is None or info["error"]["code"] == "decoder_died"
    processed = info["counters"]["processed"]
    server.wait_for(sid, lambda i: i["state"] == "running" and i["counters"]["processed"] > processed + 10,
                    what="running again after the decoder was killed")  # fmt: skip
    assert metric(server.metrics(), "overtime_source_reconnects_total", stream=sid) >= 1

    # Kill the worker: it restarts from the checkpoint with the learned weights.
    saved = server.client.post(f"/api/streams/{sid}/checkpoint").json()["frames"]
    os.kill(server.stream(sid)["pids"]["worker"], signal.SIGKILL)
    info = server.wait_for(sid, lambda i: i["counters"]["worker_restarts"] >= 1, what="a worker restart")
    info = server.wait_for(sid, lambda i: i["state"] == "running", what="running after the worker was killed")
    assert info["resumed_from"] >= saved > 0
    resumed = watch(server, sid, 15)
    assert np.median([m["loss"] for m, _ in resumed]) < 0.8 * untrained, "the restarted worker forgot what it learned"
    delete(server, sid)
    assert server.client.get(f"/api/streams/{sid}").status_code == 404


# -- a live HTTP MPEG-TS source --------------------------------------------------------------------
@pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="needs the ffmpeg command (apt-get install ffmpeg)")
def test_live_mpegts_source_learns(server, media):
    port = free_port()
    ffmpeg = subprocess.Popen(
        ["ffmpeg", "-hide_banner", "-loglevel", "error", "-re", "-stream_loop", "-1", "-i", str(media / "loop.mp4"),
         "-c", "copy", "-f", "mpegts", "-listen", "1", f"http://127.0.0.1:{port}/live.ts"],
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        time.sleep(0.5)
        sid = create(server, source=f"http://127.0.0.1:{port}/live.ts", name="live", fps=15)["id"]
        frames = watch(server, sid, 3 * LOOP)
        first, last = loss_falls(frames)
        assert last < 0.9 * first, f"loss did not trend down: {[round(m['loss'], 3) for m, _ in frames]}"
        assert server.stream(sid)["source_info"]["codec"] == "h264"
        delete(server, sid)
    finally:
        ffmpeg.kill()
        ffmpeg.wait(10)


# -- a browser webcam pushing JPEGs -----------------------------------------------------------------
def test_webcam_ingest_learns(server, media):
    info = create(server, source="webcam", name="cam", fps=15)
    assert info["ingest"] == f"/ws/streams/{info['id']}/ingest"
    frames = generate(SIZE, 300, seed=1).frames
    jpegs = [cv2.imencode(".jpg", cv2.cvtColor(f, cv2.COLOR_RGB2BGR))[1].tobytes() for f in frames]

    async def run() -> list[dict]:
        got: list[dict] = []
        async with (
            websockets.connect(server.ws(info["ingest"])) as push,
            websockets.connect(server.ws(info["ws"])) as view,
        ):

            async def send() -> None:
                for i in range(100_000):
                    await push.send(jpegs[i % len(jpegs)])
                    await asyncio.sleep(1 / 15)

            sender = asyncio.create_task(send())
            async with asyncio.timeout(90):
                while len(got) < 20:
                    message = await view.recv()
                    if isinstance(message, str) and json.loads(message)["type"] == "frame":
                        got.append(json.loads(message))
            sender.cancel()
        return got

    got = asyncio.run(run())
    assert len(got) == 20 and all(np.isfinite(m["loss"]) for m in got)
    assert server.stream(info["id"])["source_info"]["codec"] == "mjpeg"
    delete(server, info["id"])


# -- bad input -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"source": "ftp://example.com/a.mp4"}, 400, "scheme_not_allowed"),
        ({"source": "/etc/passwd"}, 400, "bad_source"),
        ({"source": "file:///etc/passwd"}, 400, "path_outside_media"),
        ({"source": "file:../../etc/passwd"}, 400, "path_outside_media"),
        ({"source": "file:missing.mp4"}, 400, "file_not_found"),
        ({"source": "demo", "model": "nope"}, 400, "bad_request"),
        ({"source": "demo", "schedule": "nope"}, 400, "bad_request"),
        ({"source": "demo", "schedule": "gpipe", "stages": 2}, 400, "bad_request"),  # one frame: no micro-batches
        ({"source": "http://"}, 400, "bad_source"),
    ],
)
def test_bad_requests_get_clear_errors(server, body, status, code):
    r = server.client.post("/api/streams", json=body)
    assert r.status_code == status, r.text
    assert r.json()["detail"]["code"] == code and r.json()["detail"]["message"]


@pytest.mark.parametrize(
    "body",
    [{}, {"source": 3}, {"source": "demo", "fps": -1}, {"source": "demo", "width": 63}, {"source": "demo", "x": 1}],
)
def test_malformed_bodies_are_422(server, body):
    r = server.client.post("/api/streams", json=body)
    assert r.status_code == 422 and r.json()["detail"]


def test_token_is_required(server):
    assert server.client.get("/api/streams", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert server.client.get("/api/streams", headers={"Authorization": ""}).status_code == 401
    assert server.client.get("/healthz", headers={"Authorization": ""}).status_code == 200

    async def ws_without_token() -> tuple[dict, int]:
        async with websockets.connect(f"{server.ws_url}/ws/streams/x?token=wrong") as ws:
            message = json.loads(await ws.recv())
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await ws.recv()
            return message, closed.value.rcvd.code

    message, close_code = asyncio.run(ws_without_token())
    assert message == {"type": "error", "code": "unauthorized", "message": message["message"]} and close_code == 1008


class _Sources(http.server.BaseHTTPRequestHandler):
    """/stall.ts sends the start of a stream, then nothing; anything else is a 404."""

    payload = b""
    release = threading.Event()

    def do_GET(self) -> None:  # noqa: N802 - the http.server API
        if self.path != "/stall.ts":
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "video/mp2t")
        self.end_headers()
        self.wfile.write(self.payload)
        self.wfile.flush()
        self.release.wait(30)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def http_sources(media):
    _Sources.payload = (media / "resized.ts").read_bytes()[:20_000]
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Sources)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    _Sources.release.set()
    httpd.shutdown()


def _settles(server, source: str, state: str, code: str | None, **body) -> dict:
    sid = create(server, source=source, **body)["id"]
    try:
        return server.wait_for(
            sid, lambda i: i["state"] == state and (i["error"] or {}).get("code") == code, 60, f"{state}/{code}"
        )
    finally:
        delete(server, sid)


def test_runtime_source_errors(server, http_sources):
    _settles(server, "file:notes.mp4", "error", "not_video")
    _settles(server, "file:truncated.mp4", "error", "decode_error")
    _settles(server, f"{http_sources}/missing.ts", "error", "not_found")
    _settles(server, f"http://127.0.0.1:{free_port()}/live.ts", "reconnecting", "source_unreachable")


def test_stream_end_resolution_change_and_stall(server, http_sources):
    info = _settles(server, "file:short.mp4", "ended", None)
    assert info["counters"]["processed"] > 0
    _settles(server, "file:resized.ts", "error", "resolution_changed")
    _settles(server, f"{http_sources}/stall.ts", "reconnecting", "stalled")


def test_max_streams_is_429(server):
    dead = f"http://127.0.0.1:{free_port()}/x.ts"
    sids = [create(server, source=dead)["id"] for _ in range(2)]
    try:
        r = server.client.post("/api/streams", json={"source": dead})
        assert r.status_code == 429 and r.json()["detail"]["code"] == "too_many_streams"
    finally:
        for sid in sids:
            delete(server, sid)


def test_nonfinite_loss_halves_lr_and_keeps_going(server):
    sid = create(server, source="file:clip.mp4", name="blowup", fps=15, loop=True, lr=10.0)["id"]
    info = server.wait_for(sid, lambda i: i["counters"]["nonfinite_losses"] >= 3, what="non-finite losses")
    assert info["lr"] <= 10.0 / 8 and info["state"] in ("starting", "running")
    assert metric(server.metrics(), "overtime_nonfinite_losses_total", stream=sid) >= 3
    server.wait_for(sid, lambda i: i["counters"]["processed"] > 0, what="frames processed after the blow-ups")
    delete(server, sid)


# -- the whole server restarts ---------------------------------------------------------------------
def test_server_restart_resumes_weights_by_name(server):
    sid = create(server, source="file:clip.mp4", name="resume", fps=15, loop=True, lr=3e-3)["id"]
    fresh = np.median([m["loss"] for m, _ in watch(server, sid, 40)[:5]])  # untrained weights, clip start
    server.stop()  # SIGTERM: the worker writes its final checkpoint
    assert (server.workdir / "checkpoints" / "resume.pt").is_file()
    server.start()
    info = create(server, source="file:clip.mp4", name="resume", fps=15, loop=True, lr=3e-3)
    assert info["name"] == "resume"
    info = server.wait_for(info["id"], lambda i: i["state"] == "running", what="running after the restart")
    assert info["resumed_from"] >= 39
    resumed = watch(server, info["id"], 5)
    # The resumed stream starts at the clip's start too: same frames, but learned weights.
    assert np.median([m["loss"] for m, _ in resumed]) < 0.8 * fresh, "the resumed stream did not keep its weights"
    delete(server, info["id"])
