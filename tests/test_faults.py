"""Faults injected into a running server: each one recovers as documented, keeps the learned weights (the resumed
weights are the last checkpoint's) and is counted in ``/metrics``.

Periodic checkpoints are switched off here (a huge interval), so the only checkpoints are the ones the test asks
for and the ones a stopping worker writes: "the last checkpoint" is then known exactly. To stay cheap, the
in-place faults (NaN, disk full) and the kills share one learning stream, in this order; counts are deltas.
The disk-full test runs last. (A 4 MiB tmpfs ran out of space after a few checkpoint renames here, with no
file open or mapped: this machine seems to free tmpfs pages lazily. 64 MiB leaves room for that.)
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import signal
import subprocess
from pathlib import Path

import pytest
import torch
from websockets.sync.client import connect

from testing.api import Api
from testing.media import make_video
from testing.outage import outage
from testing.server import ServerProcess, small_server
from testing.sources import NO_FFMPEG

pytestmark = [pytest.mark.realtime, pytest.mark.timeout(240)]
OUTAGE_S = float(os.environ.get("OVERTIME_TEST_OUTAGE_S", "5"))  # bench/outage.py runs the documented 40 s


@contextlib.contextmanager
def tiny_tmpfs(path: Path, size: str = "64m"):
    """A small filesystem for the checkpoint dir, so it can really fill up; None where mounting is not allowed."""
    path.mkdir(parents=True, exist_ok=True)
    mounted = (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True
        ).returncode
        == 0
    )
    try:
        yield path if mounted else None
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    with tiny_tmpfs(root / "checkpoints") as tmpfs:
        server = small_server(
            root,
            settings={
                "OVERTIME_ALLOW_PRIVATE": "true",  # the live source is on loopback
                "OVERTIME_CHECKPOINT_INTERVAL_S": "100000",
                "OVERTIME_READ_TIMEOUT_S": "3",
                "OVERTIME_OPEN_TIMEOUT_S": "2",
                "OVERTIME_RECONNECT_MAX_S": "1",
                "OVERTIME_FAULT_INJECTION": "true",
            },
        )
        server.tmpfs = tmpfs
        make_video(server.media_dir / "clip.mp4", frames=90)
        server.start()
        yield server
        server.stop()


@pytest.fixture(scope="module")
def api(srv):
    with srv.api() as client:
        yield client


@pytest.fixture(scope="module")
def stream(srv, api):
    """One stream learning on a looped clip, shared by the NaN, disk-full and kill tests."""
    sid = api.create({"source": "file:clip.mp4", "name": "faults", "fps": 15, "loop": True})["id"]
    api.wait_processed(sid, 10, 120)
    yield sid
    api.delete(sid)


def checkpoint_on_disk(srv: ServerProcess, name: str) -> tuple[int, str]:
    """(frames, sha256) of the stream's checkpoint file."""
    path = srv.checkpoint_dir / f"{name}.pt"
    state = torch.load(path, map_location="cpu", weights_only=True)
    weights = state["pipeline"]
    assert all(torch.isfinite(t).all() for t in _tensors(weights)), "a checkpoint holds non-finite weights"
    return int(weights["frames"]), hashlib.sha256(path.read_bytes()).hexdigest()


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _tensors(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _tensors(v)


def metric(api: Api, name: str, sid: str, **labels: str) -> float:
    return api.metrics().value(name, stream=sid, **labels)


def restarted(api, sid: str, role: str, old_pid: int, processed: int, timeout_s: float = 60) -> dict:
    """Wait for a new ``role`` process and 10 more processed frames."""
    return api.wait(
        sid,
        timeout_s,
        f"a new {role} and 10 more frames",
        lambda s: (
            s["pids"][role] not in (None, old_pid)
            and s["state"] == "running"
            and s["counters"]["processed"] >= processed + 10
        ),
    )


def test_nan_loss_restores_the_checkpoint_and_halves_the_lr(srv, api, stream):
    saved = api.checkpoint_now(stream)
    info = api.get(stream)
    r = api.http.post(f"/api/streams/{stream}/faults", json={"fault": "nan_loss"})
    assert r.status_code == 202, r.text
    after = api.wait(stream, 60, "the NaN loss handled", lambda s: s["counters"]["nonfinite_losses"] == 1)
    assert after["lr"] == pytest.approx(info["lr"] / 2)
    assert after["resumed_from"] == saved, "the restored weights must be the last checkpoint's"
    assert after["pids"]["worker"] == info["pids"]["worker"], "recovery happens in place, no restart"
    assert metric(api, "overtime_nonfinite_losses_total", stream) == 1
    (said,) = [note for note in after["notes"] if "not a number" in note]  # the stream says what it did
    assert f"the weights saved after frame {saved}" in said and "halved its rate" in said
    # A viewer who connects later hears it too, after the state and the budget, before any frame.
    with connect(srv.ws(f"/ws/streams/{stream}")) as ws:
        told = [json.loads(ws.recv(timeout=30)) for _ in range(2 + len(after["notes"]))]
    assert [m["type"] for m in told] == ["state", "budget"] + ["note"] * len(after["notes"])
    assert said in [m["note"] for m in told[2:]]
    after = api.wait_processed(stream, after["counters"]["processed"] + 10, 60)
    assert after["loss"] is not None and math.isfinite(after["loss"]), "learning goes on with finite losses"
    assert api.checkpoint_now(stream) >= saved
    checkpoint_on_disk(srv, "faults")  # finite weights


def test_sigkill_worker_resumes_from_the_last_checkpoint(srv, api, stream):
    saved = api.checkpoint_now(stream)
    before = checkpoint_on_disk(srv, "faults")
    assert before[0] == saved > 0
    info = api.get(stream)
    os.kill(info["pids"]["worker"], signal.SIGKILL)
    after = restarted(api, stream, "worker", info["pids"]["worker"], info["counters"]["processed"])
    assert after["resumed_from"] == saved, "the new worker must start from the last checkpoint's weights"
    assert checkpoint_on_disk(srv, "faults") == before, "the kill must leave the checkpoint untouched"
    assert after["counters"]["worker_restarts"] == info["counters"]["worker_restarts"] + 1
    assert metric(api, "overtime_worker_restarts_total", stream) == after["counters"]["worker_restarts"]


def test_sigkill_decoder_reconnects_and_keeps_the_weights(srv, api, stream):
    saved = api.checkpoint_now(stream)
    info = api.get(stream)
    os.kill(info["pids"]["decoder"], signal.SIGKILL)
    after = restarted(api, stream, "decoder", info["pids"]["decoder"], info["counters"]["processed"])
    on_disk, _ = checkpoint_on_disk(srv, "faults")
    assert after["resumed_from"] >= saved, "learning went backwards"
    assert after["resumed_from"] == on_disk == after["checkpoint_frames"], "resumed weights != last checkpoint"
    assert after["counters"]["reconnects"] == info["counters"]["reconnects"] + 1
    assert metric(api, "overtime_source_reconnects_total", stream) == after["counters"]["reconnects"]


def test_corrupt_bytes_mid_file_are_skipped_and_counted(srv, api):
    path = make_video(srv.media_dir / "corrupt.mp4", frames=60, seed=3)
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 2048] = os.urandom(2048)
    path.write_bytes(bytes(data))
    sid = api.create({"source": "file:corrupt.mp4", "name": "corrupt", "fps": 15})["id"]
    end = api.wait(sid, 120, "the file played to its end", lambda s: s["state"] in ("ended", "error"))
    assert end["state"] == "ended", f"a few corrupt bytes must not end the stream in error: {end['error']}"
    assert end["counters"]["decoded"] >= 40, "frames after the corrupt part were lost"
    assert metric(api, "overtime_frames_total", sid, outcome="dropped", reason="decode_error") >= 1
    on_disk, _ = checkpoint_on_disk(srv, "corrupt")
    assert on_disk == end["checkpoint_frames"] > 0, "the final checkpoint keeps what was learned"
    api.delete(sid)


@pytest.mark.skipif(NO_FFMPEG is not None, reason=str(NO_FFMPEG))
def test_live_source_outage_reconnects(srv, api):
    result = outage(api, srv.media_dir / "clip.mp4", pause_s=OUTAGE_S, name="outage")
    assert result["reconnected"], result
    assert result["reconnects_metric"] >= 1
    assert result["resumed_from"] == result["checkpoint_on_disk"] >= result["saved_before"] > 0, result
    assert result["resumed_s"] < OUTAGE_S + 30, "too slow to come back after the source returned"


def fill(directory: Path) -> Path:
    """Write zeros until the filesystem is full (unbuffered: nothing left to flush, the fd surely closed)."""
    filler = directory / "filler.bin"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        for _ in range(100_000):  # bounded: 6.4 GB, far beyond any tmpfs here
            os.write(fd, b"\0" * 65536)
    except OSError:
        pass
    finally:
        os.close(fd)
    return filler


def test_a_damaged_checkpoint_ends_its_stream_in_words_and_no_other(srv, api, stream):
    """Bytes at a name's checkpoint that are not a checkpoint (a disk's fault, another file put there): the stream of
    that name ends in ``checkpoint_unreadable``, saying so without a path, is not restarted and leaves the file as it
    was; the other stream learns on. (Before: "could not build the learner: an unexpected error".)"""
    damaged = srv.checkpoint_dir / "damaged.pt"
    damaged.write_bytes(b"not a checkpoint " * 64)
    learned = api.get(stream)["counters"]["processed"]
    sid = api.create({"source": "file:clip.mp4", "name": "damaged", "fps": 15})["id"]
    info = srv.wait_for(sid, lambda s: s["state"] == "error", 90, "the stream of the damaged checkpoint to end")
    assert info["error"]["code"] == "checkpoint_unreadable", info["error"]
    assert info["error"]["message"].startswith("checkpoint damaged.pt cannot be read"), info["error"]
    assert str(srv.checkpoint_dir) not in info["error"]["message"]
    assert info["counters"]["worker_restarts"] == 0
    assert damaged.read_bytes() == b"not a checkpoint " * 64
    api.wait_processed(stream, learned + 5, 60)
    api.delete(sid)
    damaged.unlink()


def test_disk_full_while_checkpointing_keeps_learning(srv, api, stream):
    if srv.tmpfs is None:
        pytest.skip("cannot mount a tmpfs here (needs root and CAP_SYS_ADMIN)")
    saved = api.checkpoint_now(stream)
    before = checkpoint_on_disk(srv, "faults")
    info = api.get(stream)
    filler = fill(srv.tmpfs)
    try:
        r = api.checkpoint(stream)
        assert r.status_code == 507, f"a full disk must be reported as such: {r.status_code} {r.text}"
        assert "space" in r.json()["detail"]["message"].lower()
        assert checkpoint_on_disk(srv, "faults") == before, "a failed write must leave the old checkpoint"
        assert not [p for p in srv.tmpfs.iterdir() if p.name.endswith(".tmp")], "temp files left behind"
        now = api.wait_processed(stream, info["counters"]["processed"] + 10, 60)
        assert now["pids"]["worker"] == info["pids"]["worker"], "the worker must survive a full disk"
        assert metric(api, "overtime_checkpoint_failures_total", stream) == 1
    finally:
        filler.unlink()
    assert api.checkpoint_now(stream) > saved, "checkpoints resume once there is space again"


def test_faults_never_reach_the_server(srv, api):
    """After all of the above the API process is the one we started, and it is healthy."""
    assert srv.proc.poll() is None
    assert api.http.get("/healthz").status_code == 200
