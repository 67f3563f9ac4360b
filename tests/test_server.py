"""The streaming service end to end: a real ``overtime serve`` in a subprocess on 127.0.0.1.

One server (``server`` in ``conftest.py``) is shared by the tests in this file; the last test restarts it to show
that a stream of the same name resumes its weights. Bad input and failing sources: ``test_server_errors.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time

import cv2
import numpy as np
import pytest
import websockets
from rtsp_support import RtspCamera
from server_support import beats_zero_flow, create, decode, delete, versus_start

from models.streams import generate
from server.stream.flow_formats import read_flo, read_kitti_png
from server.stream.pictures import OPACITY
from testing.media import LOOP, SIZE
from testing.sources import NO_FFMPEG, LiveHls, LiveMjpeg, LiveSource
from testing.viewers import watch, watch_images

# Loops watched before the learner is judged against its frozen start: the first is where it learns most.
LEARNING_LOOPS = 3

pytestmark = [pytest.mark.realtime, pytest.mark.slow, pytest.mark.usefixtures("no_streams_left")]


# -- learning on a file, metrics, recovery ---------------------------------------------------------
def test_file_stream_learns_and_recovers(server):
    info = create(server, source="file:loop.mp4", name="clip", fps=15, loop=True)
    sid = info["id"]
    frames = watch(server, sid, LEARNING_LOOPS * LOOP)
    ratio = versus_start(frames[LOOP:])  # after the first loop, the same pairs under the learned and the start weights
    assert ratio < 0.9, f"learned / frozen start {ratio:.3f}: {[m['start_scored'] for m, _ in frames]}"
    meta, jpeg = frames[-1]
    assert set(meta) >= {"frame", "loss", "loss_zero", "dp_s", "work_s", "ds_s", "stage_dp_s", "latency_s", "dropped"}
    assert meta["ds_s"] == pytest.approx(1 / 15) and len(meta["stage_dp_s"]) == 2
    assert meta["learning_size"] == [SIZE, SIZE] and meta["flow_scale"] >= 1.0
    assert 0 < max(meta["stage_dp_s"]) <= meta["dp_s"] and meta["work_s"] > 0, "a step lasts its slowest stage"
    # The baseline: the same loss for zero flow on the same pair. A net that learned does better on this clip.
    assert np.median([m["loss"] for m, _ in frames[-LOOP:]]) < np.median([m["loss_zero"] for m, _ in frames[-LOOP:]])
    assert 0 < meta["latency_s"] < 5 and meta["dp_s"] > 0
    image = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)
    assert image.shape == (SIZE, SIZE, 3)
    assert [m["frame"] for m, _ in frames] == sorted(m["frame"] for m, _ in frames)
    # Each time the file starts again its first frame follows its last, the same scene: a new shot all the same, one
    # per LOOP frames of the file shown (dropped ones included: the span of capture times at 15 fps).
    shown = round((frames[-1][0]["capture_time"] - frames[0][0]["capture_time"]) * 15) + 1
    assert shown // LOOP - 1 <= sum(m["scene_cut"] for m, _ in frames) <= -(-shown // LOOP)

    scrape = server.metrics()
    assert scrape.require("overtime_frames_total", stream=sid, outcome="processed") >= 60
    assert scrape.require("overtime_frames_total", stream=sid, outcome="decoded") >= 60
    assert scrape.require("overtime_step_seconds_count", stream=sid) >= 60
    assert scrape.require("overtime_stage_step_seconds_count", stream=sid, stage="1") >= 60
    assert scrape.require("overtime_latency_seconds_count", stream=sid) >= 60
    assert scrape.require("overtime_frame_interval_seconds", stream=sid) == pytest.approx(1 / 15)
    assert scrape.require("overtime_budget_ratio", stream=sid) > 0
    assert scrape.require("overtime_loss", stream=sid) > 0
    assert scrape.require("overtime_loss_zero_flow", stream=sid) > 0
    assert scrape.require("overtime_frame_work_seconds_count", stream=sid) >= 60
    assert scrape.require("overtime_streams", state="running") == 1, server.client.get("/api/streams").text
    for name in ("overtime_source_reconnects_total", "overtime_ws_clients", "overtime_ws_dropped_total"):
        scrape.require(name, stream=sid)

    # Viewers that blend themselves ask for the frame and the flow picture apart; the overlay is the frame tinted by
    # the flow's colours (white, no motion, leaves it as it is).
    message, jpegs = watch_images(server, sid, "frame,flow,overlay")
    assert message["images"] == ["frame", "flow", "overlay"] and len(jpegs) == 3
    frame, flow, overlay = map(decode, jpegs)
    assert frame.shape == flow.shape == overlay.shape == (SIZE, SIZE, 3)
    tinted = frame * (1 - OPACITY + OPACITY * flow / 255)
    # Each picture is its own JPEG, off by a few levels where the flow's colours are saturated (a CI run's tint read 6.0
    # levels off the overlay pixel by pixel); over 8x8 blocks, JPEG's own, those errors average out (1.0-1.2 levels
    # here, against 13-27 between the frame and its overlay).
    assert np.abs(cv2.blur(tinted, (8, 8)) - cv2.blur(overlay, (8, 8))).mean() < 3
    assert np.abs(frame - flow).mean() > 6, "the frame and the flow picture are two pictures"
    message, _ = watch_images(server, sid, "frame,nope")
    assert message["type"] == "error" and message["code"] == "bad_request"

    # The flow itself: KITTI's 16-bit PNG and Middlebury's .flo over the WebSocket and from the API, the same field.
    message, (png, flo) = watch_images(server, sid, "flow16,flo")
    field, valid = read_kitti_png(png)
    assert field.shape == (SIZE, SIZE, 2) and valid.all() and np.abs(field - read_flo(flo)).max() <= 1 / 128 + 1e-6
    got = server.client.get(f"/api/streams/{sid}/flow", params={"format": "flo"})
    assert got.status_code == 200 and read_flo(got.content).shape == (SIZE, SIZE, 2)
    assert int(got.headers["x-overtime-frame"]) >= message["frame"]
    assert server.client.get(f"/api/streams/{sid}/flow").headers["content-type"] == "image/png"  # kitti by default
    assert server.client.get(f"/api/streams/{sid}/flow", params={"format": "bmp"}).status_code == 422

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
    assert server.metrics().require("overtime_source_reconnects_total", stream=sid) >= 1

    # Kill the worker: it restarts from the checkpoint with the learned weights.
    saved = server.client.post(f"/api/streams/{sid}/checkpoint").json()["frames"]
    os.kill(server.stream(sid)["pids"]["worker"], signal.SIGKILL)
    info = server.wait_for(sid, lambda i: i["counters"]["worker_restarts"] >= 1, what="a worker restart")
    info = server.wait_for(sid, lambda i: i["state"] == "running", what="running after the worker was killed")
    assert info["resumed_from"] >= saved > 0
    # Learning goes on from the checkpoint (that the weights are the learned ones: the server restart's test below),
    # judged against zero flow on the same pairs: the median loss read 0.41-0.45 of zero flow's in three runs of
    # 2026-12-07. Not against the frozen start: it scores a pair every 30 frames at most, one phase of the 30-frame
    # loop, and after the restart that phase may be the pair before the loop's cut, where the start is nearly as good
    # (0.90-0.94 of its loss; two such scorings read 0.917 and failed the 0.9 asked before).
    learned, zero = beats_zero_flow(watch(server, sid, 2 * LOOP))
    assert learned < 0.7 * zero, f"the restarted worker's loss {learned:.4f}, zero flow's {zero:.4f}"
    delete(server, sid)
    assert server.client.get(f"/api/streams/{sid}").status_code == 404


@pytest.mark.skipif(NO_FFMPEG is not None, reason=str(NO_FFMPEG))
def test_a_portrait_phone_video_is_shown_and_learned_upright(server):
    sid = create(server, source="file:portrait.mp4", name="portrait", loop=True)["id"]
    seen = watch(server, sid, 2)  # stored as 96x64 pictures marked to be turned a quarter, as phones store them
    info = server.stream(sid)
    assert (info["width"], info["height"]) == (64, 96) and decode(seen[-1][1]).shape == (96, 64, 3)
    assert info["learning_size"]["height"] > info["learning_size"]["width"]
    delete(server, sid)


# -- the picture and the rate follow the source; the history outlives a viewer ------------------------------------
def test_sizes_and_rate_follow_a_4_3_source_and_history_survives_a_reconnect(server):
    info = create(server, source="file:four_three.mp4", name="four-three", loop=True)
    assert info["auto"] and info["width"] is None  # the picture's size is known once the source opened
    sid = info["id"]
    first = watch(server, sid, 12)
    # A budget decision at the source's rate. Whether two cores keep 12 fps at 64x48 is the machine's: a frame's work
    # read 74-99 ms of the 83 here (2026-12-07), over the 85 % a stream may take as often as under it.
    info = server.wait_for(sid, lambda i: "12 fps" in (i["budget_note"] or ""), what="a budget decision at its rate")
    assert info["fps"] == pytest.approx(12) and (info["width"], info["height"]) == (160, 120)  # the source's own
    assert info["learning_size"] == {"width": 64, "height": 48} and "64×48" in info["budget_note"]
    assert info["phase"] is None and info["init"] == "scratch"
    assert first[-1][0]["ds_s"] == pytest.approx(1 / 12) and decode(first[-1][1]).shape == (120, 160, 3)
    # A page that reconnects (or reloads) gets the charts' points back, those it saw included.
    points = server.client.get(f"/api/streams/{sid}/history").json()["points"]
    seen = {m["frame"]: m for m, _ in first}
    kept = [p for p in points if p["frame"] in seen]
    assert len(kept) == len(seen) and all(p["loss"] == seen[p["frame"]]["loss"] for p in kept)
    assert all(p["loss_zero"] == seen[p["frame"]]["loss_zero"] for p in kept)
    again = watch(server, sid, 3)
    points = server.client.get(f"/api/streams/{sid}/history").json()["points"]
    assert [p["frame"] for p in points] == sorted(p["frame"] for p in points)
    assert points[-1]["frame"] >= again[-1][0]["frame"] > first[-1][0]["frame"]
    delete(server, sid)
    assert server.client.get(f"/api/streams/{sid}/history").status_code == 404


# -- a live HTTP MPEG-TS source --------------------------------------------------------------------
@pytest.mark.skipif(NO_FFMPEG is not None, reason=str(NO_FFMPEG))
def test_live_mpegts_source_learns(server, media):
    with LiveSource(media / "loop.mp4") as live:  # returns once ffmpeg listens
        sid = create(server, source=live.url, name="live", fps=15)["id"]
        frames = watch(server, sid, LEARNING_LOOPS * LOOP)
        loss, zero = beats_zero_flow(frames)
        assert loss < 0.9 * zero, f"not clearly better than zero flow: {loss:.4f} vs {zero:.4f}"
        assert server.stream(sid)["source_info"]["codec"] == "h264"
        delete(server, sid)


# -- a live HLS source: a segment at a time ---------------------------------------------------------
@pytest.mark.skipif(NO_FFMPEG is not None, reason=str(NO_FFMPEG))
def test_live_hls_is_paced_so_its_segments_are_learned_from_not_dropped(server, media):
    with LiveHls(media / "clip.mp4") as live:  # 15 fps in segments of 1 s
        sid = create(server, source=live.url, name="hls", fps=15)["id"]
        start = server.wait_for(sid, lambda i: i["counters"]["processed"] >= 5, what="the first frames learned")
        time.sleep(6)
        end = server.stream(sid)
        delete(server, sid)
    processed, dropped = (end["counters"][k] - start["counters"][k] for k in ("processed", "dropped"))
    # Unpaced, the ring kept about two frames of each segment's fifteen (2 processed a second, 13 dropped).
    assert processed >= 0.5 * 15 * 6 and dropped < processed, (processed, dropped)
    assert end["source_info"]["container"] == "hls" and end["state"] == "running"


# -- an IP camera's MJPEG over HTTP, which states no rate ------------------------------------------------
def test_a_camera_that_states_no_rate_is_timed_by_its_frames_arrival(server):
    with LiveMjpeg(generate(SIZE, 60, seed=3).frames, fps=10) as camera:
        sid = create(server, source=camera.url, name="mjpeg")["id"]
        frames = watch(server, sid, 40)
        delete(server, sid)
    # FFmpeg numbers its frames at 25 fps, a rate it guessed; the frames come every 0.1 s, and so ΔS reads.
    assert frames[-1][0]["ds_s"] == pytest.approx(0.1, rel=0.2), [m["ds_s"] for m, _ in frames]


# -- a live RTSP source -----------------------------------------------------------------------------
@pytest.mark.skipif(NO_FFMPEG is not None, reason=str(NO_FFMPEG))
def test_live_rtsp_source_learns_then_reconnects_when_it_goes_away(server, media):
    with RtspCamera(media / "loop.mp4") as camera:
        sid = create(server, source=camera.url, name="rtsp", fps=15)["id"]
        frames = watch(server, sid, LEARNING_LOOPS * LOOP)
        loss, zero = beats_zero_flow(frames)
        assert loss < 0.9 * zero, f"not clearly better than zero flow: {loss:.4f} vs {zero:.4f}"
        assert server.stream(sid)["source_info"]["codec"] == "h264"
    info = server.wait_for(sid, lambda i: i["state"] == "reconnecting", what="reconnecting once the camera is gone")
    assert info["counters"]["reconnects"] >= 1 and info["counters"]["processed"] >= LEARNING_LOOPS * LOOP
    delete(server, sid)


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
    # The resumed stream starts at the clip's start too: same frames, but learned weights (a stream that forgot
    # them would start from the same initial weights, drawn from its name, and score exactly ``fresh``).
    assert np.median([m["loss"] for m, _ in resumed]) < 0.95 * fresh, "the resumed stream did not keep its weights"
    delete(server, info["id"])
