"""`overtime watch` against a live server: a playable MP4 with exactly the frames asked for, the CSV, exit codes."""

from __future__ import annotations

import csv
import math

import av
import pytest

from clients import watch
from tests.live_server import live_server

pytestmark = pytest.mark.slow
FRAMES = 24


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with live_server(tmp_path_factory.mktemp("server")) as url:
        yield url


def test_watch_demo_saves_video_and_metrics(server, tmp_path, capsys):
    video, table = tmp_path / "out.mp4", tmp_path / "losses.csv"
    argv = ["demo", "--url", server, "--frames", str(FRAMES), "--fps", "10", "--save", str(video), "--csv", str(table)]
    assert watch.main(argv) == watch.OK
    assert "ΔP/ΔS" in capsys.readouterr().err  # the progress line

    with av.open(str(video)) as container:
        stream = container.streams.video[0]
        decoded = [f.to_ndarray(format="rgb24") for f in container.decode(stream)]
        assert stream.codec_context.name == "h264"
        assert float(stream.average_rate) == pytest.approx(10, rel=0.05)
    assert len(decoded) == FRAMES
    assert decoded[-1].std() > 5, "the recorded overlay is blank"

    with table.open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == FRAMES
    frames = [int(r["frame"]) for r in rows]
    assert frames == sorted(frames) and len(set(frames)) == FRAMES
    assert all(math.isfinite(float(r["loss"])) and float(r["ds_s"]) == pytest.approx(0.1) for r in rows)
    assert any(name.startswith("stage_") for name in rows[0])


def test_watch_exit_codes(server, tmp_path):
    assert watch.main(["no-such-stream", "--url", server]) == watch.REJECTED
    assert watch.main(["ftp://example.com/a.mp4", "--url", server]) == watch.REJECTED
    assert watch.main(["demo", "--url", "http://127.0.0.1:9", "--frames", "1"]) == watch.UNREACHABLE
    code = watch.main(["http://127.0.0.1:9/nothing.mp4", "--url", server, "--frames", "5", "--idle-timeout", "20"])
    assert code in (watch.STREAM_FAILED, watch.NO_FRAMES)
    with pytest.raises(SystemExit) as usage:
        watch.main(["demo", "--frames", "0"])
    assert usage.value.code == watch.USAGE
