"""A video sent to a server whose disk is (nearly) full: refused with 507 ``no_space`` in words, before a byte is
written or when the disk fills while it comes, and nothing is left in the media folder. In-process (the app without
its lifespan: these routes need no streams), the disk's state made by replacing what reads it."""

from __future__ import annotations

import errno
import shutil
from pathlib import Path
from typing import Any

import pytest

from server.api import app as app_module
from server.api.routes import media
from server.settings import Settings

#: Starlette's TestClient (imported in the fixture, under this filter) says it will move off httpx; its requests are
#: the same.
pytestmark = pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")


@pytest.fixture
def client(tmp_path) -> Any:
    from fastapi.testclient import TestClient  # noqa: PLC0415 - see pytestmark

    settings = Settings(media_dir=tmp_path / "media", token=None, max_upload_mb=1)
    (tmp_path / "media").mkdir()
    return TestClient(app_module.create_app(settings))  # not entered: no lifespan, no stream manager


def _folder(client: Any) -> list[str]:
    return sorted(p.name for p in Path(client.app.state.settings.media_dir).iterdir())


def test_an_upload_that_would_leave_the_disk_under_its_reserve_is_refused_before_writing(client, monkeypatch):
    usage = shutil.disk_usage("/")
    monkeypatch.setattr(media.shutil, "disk_usage", lambda _: usage._replace(free=media.MIN_FREE_BYTES + 1000))
    r = client.put("/api/media/clip.mp4", content=b"\0" * 2000)  # stated: 2000 bytes, 1000 more than the room
    assert r.status_code == 507 and r.json()["detail"] == {
        "code": "no_space", "message": "the server's disk has no room for this video"}  # fmt: skip
    assert _folder(client) == []
    ok = client.put("/api/media/clip.mp4", content=b"\0" * 500)  # within the room: on to the video check
    assert ok.status_code == 415 and ok.json()["detail"]["code"] == "not_video" and _folder(client) == []


def test_a_disk_that_fills_while_the_video_comes_is_507_and_leaves_nothing(client, monkeypatch):
    def full(self, chunk: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(media.MediaUpload, "write", full)
    r = client.put("/api/media/clip.mp4", content=b"\0" * 2000)
    assert r.status_code == 507 and r.json()["detail"] == {
        "code": "no_space", "message": "the server's disk filled up while the video came"}  # fmt: skip
    assert _folder(client) == []  # the hidden part file went too
