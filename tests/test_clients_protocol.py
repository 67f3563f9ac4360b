"""The CLI's reading of the viewer WebSocket, against a scripted in-process server: metrics/image pairing, the
two-image layout ("images": ["frame", "flow"]) the protocol allows, state, budget and note messages, and close
codes."""

from __future__ import annotations

import json
import threading

import av
import cv2
import numpy as np
import pytest
from websockets.sync.server import serve

from clients import watch
from clients.recording import VideoRecorder, decode_jpeg
from clients.stream_api import ApiError, Frame, StreamApi


def jpeg(rgb: np.ndarray) -> bytes:
    return cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))[1].tobytes()


def metrics(frame: int, **extra) -> str:
    m = {"type": "frame", "frame": frame, "loss": 0.1, "dp_s": 0.05, "ds_s": 0.1, "stage_dp_s": [0.04, 0.05]}
    return json.dumps({**m, "latency_s": 0.2, "dropped": 0, **extra})


def scripted(script):
    """A WebSocket server on 127.0.0.1 that plays `script(ws)` to each client; yields a StreamApi pointed at it."""

    def handler(ws):
        script(ws)

    server = serve(handler, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    port = server.socket.getsockname()[1]
    return server, StreamApi(f"http://127.0.0.1:{port}")


@pytest.fixture
def play():
    servers = []

    def start(script):
        server, api = scripted(script)
        servers.append(server)
        return api

    yield start
    for server in servers:
        server.shutdown()


GREY = np.full((16, 16, 3), 100, np.uint8)
RED = np.zeros((16, 16, 3), np.uint8)
RED[..., 0] = 255


def test_overlay_pairs_and_state_messages(play):
    def script(ws):
        ws.send(json.dumps({"type": "state", "state": "running", "error": None}))
        ws.send(jpeg(GREY))  # an image without its metrics (joined mid-pair): skipped
        for i in range(3):
            ws.send(metrics(i))
            ws.send(jpeg(GREY))
        ws.send(json.dumps({"type": "state", "state": "ended", "error": None}))

    items = list(play(script).frames("s1", idle_timeout=5))
    assert items[0]["state"] == "running" and items[-1]["state"] == "ended"
    frames = [i for i in items if isinstance(i, Frame)]
    assert [f.metrics["frame"] for f in frames] == [0, 1, 2]
    assert all(list(f.images) == ["overlay"] for f in frames)


def test_a_named_layout_pairs_each_image_with_its_kind(play):
    asked = []

    def script(ws):
        asked.append(ws.request.path)
        ws.send(metrics(7, images=["frame", "flow", "flo"]))
        ws.send(jpeg(GREY))
        ws.send(jpeg(RED))
        ws.send(b"PIEH-the-field")
        ws.close()

    api = play(script)
    (frame,) = [i for i in api.frames("s1", idle_timeout=5, images=["frame", "flow", "flo"]) if isinstance(i, Frame)]
    assert asked == ["/ws/streams/s1?images=frame%2Cflow%2Cflo"]
    assert list(frame.images) == ["frame", "flow", "flo"] and frame.images["flo"] == b"PIEH-the-field"
    assert abs(decode_jpeg(frame.images["flow"])[..., 0].mean() - 255) < 6
    assert abs(decode_jpeg(frame.images["frame"]).astype(int).mean() - 100) < 6


@pytest.mark.parametrize(("close_code", "status"), [(1008, 401), (4404, 404)])
def test_refusals_become_api_errors(play, close_code, status):
    def script(ws):
        ws.send(json.dumps({"type": "error", "code": "x", "message": "no"}))
        ws.close(close_code, "refused")

    with pytest.raises(ApiError) as err:
        list(play(script).frames("s1", idle_timeout=5))
    assert err.value.status == status


def test_silence_times_out(play):
    def script(ws):
        ws.recv()  # says nothing until the client goes away

    with pytest.raises(TimeoutError):
        list(play(script).frames("s1", idle_timeout=0.5))


def test_a_recording_lasts_as_long_as_the_frames_took(tmp_path):
    """100 frames that took 16.8 s make a 16.8 s video, not 100 / fps = 10 s."""
    captured = 1000.0 + np.cumsum(np.random.default_rng(0).uniform(0.1, 0.24, 100))
    video = VideoRecorder(tmp_path / "slow.mp4", fps=10)
    for t in captured:
        video.write(np.full((48, 64, 3), int(t * 50) % 255, np.uint8), float(t))
    video.close()
    with av.open(str(tmp_path / "slow.mp4")) as container:
        times = [f.time for f in container.decode(container.streams.video[0])]
    span = captured[-1] - captured[0]
    assert len(times) == 100 and span > 15 and times[-1] == pytest.approx(span, abs=0.002)  # not 9.9 s
    assert np.allclose(times, captured - captured[0], atol=0.002)


def test_a_recording_shows_a_picture_turned_on_its_side_between_bars(tmp_path):
    """A stream whose source turned (a phone on its side) sends pictures of another shape: the video, one size for
    good, shows them whole and unsquashed, between black bars; a picture rounded a little differently is stretched."""
    video = VideoRecorder(tmp_path / "turned.mp4", fps=10)
    video.write(np.full((48, 64, 3), 200, np.uint8), 0.0)
    video.write(np.full((50, 64, 3), 200, np.uint8), 0.1)  # the same shape, rounded another way
    video.write(np.full((64, 48, 3), 200, np.uint8), 0.2)  # turned
    video.close()
    with av.open(str(tmp_path / "turned.mp4")) as container:
        same, _, turned = (f.to_ndarray(format="rgb24").mean(axis=(0, 2)) for f in container.decode(video=0))
    assert same.min() > 180  # stretched: no bar
    assert turned[:4].max() < 20 and turned[-4:].max() < 20 and turned[30:34].min() > 180  # 36 wide, centred
    assert (turned > 100).sum() == pytest.approx(36, abs=2)


def test_watch_says_the_budget_and_the_streams_notes(play, capsys):
    """`overtime watch` prints, above its progress line, each new learning size or verdict of the frame budget (not
    every new estimate of a frame's milliseconds) and each thing the stream did on its own."""

    def budget(size, note):
        return json.dumps({"type": "budget", "learning_size": size, "note": note})

    slower = "learning at 64×48: a frame's work takes {} ms of 33 ms; a smaller size if that goes on"

    def script(ws):
        ws.send(json.dumps({"type": "state", "state": "running", "error": None, "phase": None}))
        ws.send(budget([64, 48], slower.format(54)))
        ws.send(budget([64, 48], slower.format(57)))  # a new estimate, the same verdict: not said again
        ws.send(budget([32, 24], "cannot keep 30 fps: even at 32×24 a frame's work takes 40 ms of 33 ms"))
        ws.send(metrics(0))
        ws.send(jpeg(GREY))
        ws.send(json.dumps({"type": "note", "note": "frame 0: learning fell behind its start"}))
        ws.send(json.dumps({"type": "state", "state": "ended", "error": None, "phase": None}))

    api = play(script)
    assert watch.follow(api, {"id": "s1", "fps": 30}, watch.parse_args(["s1"])) == watch.OK
    said = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("frame ")]
    assert said == [
        "stream running",
        f"budget: {slower.format(54)}",
        "budget: cannot keep 30 fps: even at 32×24 a frame's work takes 40 ms of 33 ms",
        "note: frame 0: learning fell behind its start",
        "stream ended",
    ]
