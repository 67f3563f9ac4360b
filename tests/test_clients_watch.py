"""`overtime watch` against a live server: a playable MP4 with exactly the frames asked for, each at its capture time,
one .flo per frame, the CSV, exit codes."""

from __future__ import annotations

import csv
import math
import subprocess
import sys

import av
import cv2
import httpx
import numpy as np
import pytest

from clients import watch
from clients.stream_api import ApiError
from models.streams import generate, write_mp4
from testing.server import ServerProcess

pytestmark = [pytest.mark.realtime, pytest.mark.slow]
# Loopback sources allowed (the unreachable-URL case), no stream of the server's own, and patience with
# stream start-up on a loaded 2-core box.
SERVER_FLAGS = ("--allow-private", "--no-demo-stream", "--read-timeout-s", "60", "--max-upload-mb", "1")
FRAMES = 24


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with ServerProcess(tmp_path_factory.mktemp("server"), *SERVER_FLAGS) as srv:
        yield srv.url


def test_watch_demo_saves_video_flow_and_metrics(server, tmp_path):
    video, table, flows = tmp_path / "out.mp4", tmp_path / "losses.csv", tmp_path / "flows"
    argv = ["demo", "--url", server, "--frames", str(FRAMES), "--fps", "10", "--save", str(video), "--csv", str(table)]
    argv += ["--save-flow", str(flows), "--picture", "frame"]
    argv += ["--idle-timeout", "150"]  # stream start-up on a loaded 2-core box
    # The real command line: `overtime watch ...` is server.cli dispatching to clients.watch.
    command = [sys.executable, "-m", "server.cli", "watch", *argv]
    run = subprocess.run(command, capture_output=True, text=True, timeout=240)
    assert run.returncode == watch.OK, run.stderr
    assert "ΔP/ΔS" in run.stderr  # the progress line

    with table.open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == FRAMES
    frames = [int(r["frame"]) for r in rows]
    assert frames == sorted(frames) and len(set(frames)) == FRAMES
    assert all(float(r["ds_s"]) == pytest.approx(0.1) and float(r["work_s"]) > 0 for r in rows)
    # Each loss is a number, but where the step learned from a made pair served known nowhere (one in five at D = 2).
    learned = [r for r in rows if r["loss"] != ""]
    assert len(learned) >= 0.75 * FRAMES and all(r["loss_zero"] == "" for r in rows if r["loss"] == "")
    assert all(math.isfinite(float(r["loss"])) and math.isfinite(float(r["loss_zero"])) for r in learned)
    assert any(name.startswith("stage_") for name in rows[0])
    assert {r["scene_cut"] for r in rows} == {"0"}  # the demo is one shot

    captured = np.array([float(r["capture_time"]) for r in rows])
    with av.open(str(video)) as container:
        stream = container.streams.video[0]
        decoded = [(f.time, f.to_ndarray(format="rgb24")) for f in container.decode(stream)]
        assert stream.codec_context.name == "h264"
    assert len(decoded) == FRAMES
    assert decoded[-1][1].std() > 5, "the recorded frame is blank"
    # Each frame at its capture time: the video lasts as long as the session it recorded, not FRAMES / fps.
    assert np.allclose([t for t, _ in decoded], captured - captured[0], atol=0.002)

    files = sorted(flows.glob("*.flo"))
    assert [int(f.stem) for f in files] == frames  # one per frame, named by its index
    field = cv2.readOpticalFlow(str(files[-1]))
    assert field.ndim == 3 and field.shape[2] == 2 and np.isfinite(field).all()


def test_watch_exit_codes(server, tmp_path, capsys):
    assert watch.main(["no-such-stream", "--url", server]) == watch.REJECTED
    assert "has no stream 'no-such-stream'" in capsys.readouterr().err
    clip = tmp_path / "clip.mp4"
    clip.write_bytes(b"not a video")  # a file on this machine is sent; the server says what it is not
    assert watch.main([str(clip), "--url", server]) == watch.REJECTED
    assert "not video: the file sent is not a video (HTTP 415)" in capsys.readouterr().err
    clip.write_bytes(b"\0" * (2**20 + 1))  # over the server's limit: said before a byte is sent
    assert watch.main([str(clip), "--url", server]) == watch.REJECTED
    assert "the server takes videos of at most 1 MB" in capsys.readouterr().err
    assert watch.main(["ftp://example.com/a.mp4", "--url", server]) == watch.REJECTED
    assert watch.main(["demo", "--url", "http://127.0.0.1:9", "--frames", "1"]) == watch.UNREACHABLE
    # A live source that cannot be reached: the stream errors or keeps reconnecting; either way no frames come.
    code = watch.main(["http://127.0.0.1:9/nothing.mp4", "--url", server, "--frames", "5", "--idle-timeout", "2"])
    assert code in (watch.STREAM_FAILED, watch.NO_FRAMES)
    with pytest.raises(SystemExit) as usage:
        watch.main(["demo", "--frames", "0"])
    assert usage.value.code == watch.USAGE


def test_a_video_on_this_machine_is_sent_watched_and_removed_again(server, tmp_path, capsys):
    """The server reads files from its media folder only: `overtime watch PATH` sends the file there first, under its
    own name with what a media name cannot hold as '-', or a free name where the folder holds another video of that
    name (which stays as it was); it deletes what it sent on exit, unless --keep. A video the folder holds already
    (the same name and size) is played, not sent again, and stays."""

    def media() -> dict[str, int]:
        """The folder's videos but the demo's (there once a test before has played it)."""
        files = httpx.get(f"{server}/api/media", timeout=10).json()["files"]
        return {f["name"]: f["size_bytes"] for f in files if f["name"] != watch.DEMO_NAME}

    def watched(*flags: str) -> str:
        assert watch.main([str(clip), "--url", server, "--frames", "3", "--idle-timeout", "120", *flags]) == watch.OK
        return capsys.readouterr().err

    other = tmp_path / "other.mp4"
    write_mp4(generate(64, 8, seed=5).frames, other, fps=15)
    httpx.put(f"{server}/api/media/my-clip--1-.mp4", content=other.read_bytes(), timeout=30).raise_for_status()
    clip = tmp_path / "my clip (1).mp4"
    write_mp4(generate(64, 20, seed=4).frames, clip, fps=15)
    assert clip.stat().st_size != other.stat().st_size

    err = watched()
    assert f"sending {clip}" in err and "from file:my-clip--1--2.mp4" in err, err
    assert media() == {"my-clip--1-.mp4": other.stat().st_size}, "the video sent is deleted, the other one kept"

    err = watched("--keep")
    assert "from file:my-clip--1--2.mp4" in err and "left" not in err, err
    assert media()["my-clip--1--2.mp4"] == clip.stat().st_size
    httpx.delete(f"{server}/api/media/my-clip--1-.mp4", timeout=10).raise_for_status()
    clip = clip.rename(tmp_path / "my-clip--1--2.mp4")
    err = watched()
    assert f"sending {clip}" not in err and "not sending it again" in err and "from file:my-clip--1--2.mp4" in err, err
    assert media() == {"my-clip--1--2.mp4": clip.stat().st_size}, "a video this command did not send stays"


def test_a_sent_video_the_server_keeps_is_left_in_words(capsys):
    """Another stream came to play the video this command sent: the server refuses to delete it (409), and the
    command says what it left where, not a traceback."""

    class RefusingApi:
        def delete_media(self, name: str) -> None:
            raise ApiError(409, words)

    words = "media in use: streams play this video (theirs): delete them first"
    watch.remove_sent(RefusingApi(), "clip.mp4")
    err = capsys.readouterr().err
    assert err == f"overtime watch: left clip.mp4 in the server's media folder: {words}\n", err


def test_a_name_is_freed_within_a_media_names_length():
    assert watch.free_name("a.mp4", {"b.mp4"}) == "a.mp4"
    assert watch.free_name("a.mp4", {"a.mp4", "a-2.mp4"}) == "a-3.mp4"
    assert watch.free_name("demo.mp4", set()) == "demo-2.mp4", "the server's demo name is never sent to"
    assert watch.free_name("noext", {"noext"}) == "noext-2"
    long = "x" * 124 + ".mp4"
    freed = watch.free_name(long, {long})
    assert len(freed) == 128 and freed.endswith("x-2.mp4")


def test_a_state_says_what_the_stream_does_and_why():
    """A live source that keeps failing only reconnects, never errors: its reason is shown beside the phase."""
    error = {"code": "source_unreachable", "message": "cannot open the source: not found"}
    reconnecting = {"state": "reconnecting", "phase": "opening the source", "error": error}
    assert watch.state_words(reconnecting) == (
        "stream reconnecting: opening the source (source unreachable: cannot open the source: not found)"
    )
    assert watch.state_words({"state": "starting", "phase": "opening the source", "error": None}) == (
        "stream starting: opening the source"
    )
    assert watch.state_words({"state": "error", "phase": "", "error": error}).startswith("stream error: source unr")
    assert watch.state_words({"state": "running"}) == "stream running"
