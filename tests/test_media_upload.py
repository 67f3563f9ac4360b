"""A video sent into the media folder (``PUT /api/media/{name}``): a stream plays it as ``file:NAME``; a name that is
not one, a file that is not a video or is too large, is refused in words, and leaves nothing in the folder; a video is
deleted (``DELETE``) once no stream plays it."""

from __future__ import annotations

import pytest
from server_support import create, delete

pytestmark = pytest.mark.realtime


def _folder(server) -> set[str]:
    """Every file in the media folder, hidden ones (an upload under way) included."""
    return {p.name for p in server.media_dir.iterdir()}


def test_a_video_sent_is_listed_and_plays_as_a_file_source(server, media):
    sent = server.client.put("/api/media/sent-clip.mp4", content=(media / "short.mp4").read_bytes())
    assert sent.status_code == 201, sent.text
    assert sent.json() == {"name": "sent-clip.mp4", "size_bytes": (media / "short.mp4").stat().st_size,
                           "source": "file:sent-clip.mp4"}  # fmt: skip
    assert (server.media_dir / "sent-clip.mp4").read_bytes() == (media / "short.mp4").read_bytes()
    folder = server.client.get("/api/media").json()
    listed = {f["name"]: f for f in folder["files"]}
    assert listed["sent-clip.mp4"]["source"] == "file:sent-clip.mp4" and "clip.mp4" in listed
    assert folder["max_upload_bytes"] == 2**20  # the tests' server: --max-upload-mb 1
    sid = create(server, source="file:sent-clip.mp4")["id"]
    try:
        ended = server.wait_for(sid, lambda i: i["state"] == "ended", 90, "played to its end")
        assert ended["counters"]["processed"] > 0 and ended["error"] is None, ended
    finally:
        delete(server, sid)
    again = server.client.put("/api/media/sent-clip.mp4", content=(media / "two_frames.mp4").read_bytes())
    assert again.status_code == 201 and again.json()["size_bytes"] == (media / "two_frames.mp4").stat().st_size


@pytest.mark.parametrize(
    ("name", "body", "status", "code", "words"),
    [
        (".hidden.mp4", b"-", 400, "bad_media_name", "does not start with '.'"),
        ("a%20b.mp4", b"-", 400, "bad_media_name", "letters, digits"),
        ("demo.mp4", b"-", 400, "bad_media_name", "the service's own demo video"),
        ("notes.mp4", b"this is not a video\n" * 50, 415, "not_video", "the file sent is not a video"),
        ("empty.mp4", b"", 415, "not_video", "the file sent is empty"),
        ("truncated.mp4", None, 415, "decode_error", "the video is corrupt or truncated"),
        ("large.mp4", b"\0" * (2**20 + 1), 413, "too_large", "at most 1 MB"),
    ],
)
def test_what_is_not_a_video_to_keep_is_refused_in_words(server, media, name, body, status, code, words):
    before = _folder(server)
    body = (media / "clip.mp4").read_bytes()[:3000] if body is None else body
    r = server.client.put(f"/api/media/{name}", content=body)
    assert r.status_code == status and r.json()["detail"]["code"] == code, r.text
    assert words in r.json()["detail"]["message"]
    assert _folder(server) == before  # nothing half-written left behind, nothing replaced


def test_a_body_of_unstated_length_is_cut_off_at_the_limit(server):
    """Sent in chunks with no Content-Length: the server counts what comes and stops at its limit."""
    before = _folder(server)

    def chunks():
        for _ in range(40):
            yield b"\0" * 2**16  # 2.5 MB in all

    r = server.client.put("/api/media/chunked.mp4", content=chunks())
    assert r.status_code == 413 and r.json()["detail"]["code"] == "too_large", r.text
    assert _folder(server) == before


def test_a_video_is_deleted_once_no_stream_plays_it(server, media):
    assert server.client.put("/api/media/to-delete.mp4", content=(media / "short.mp4").read_bytes()).status_code == 201
    sid = create(server, source="file:to-delete.mp4", loop=True, name="looping-one")["id"]  # plays until deleted
    try:
        r = server.client.delete("/api/media/to-delete.mp4")
        assert r.status_code == 409 and r.json()["detail"] == {
            "code": "media_in_use", "message": "streams play this video (looping-one): delete them first"}  # fmt: skip
        assert "to-delete.mp4" in _folder(server)
    finally:
        delete(server, sid)
    before = _folder(server)
    assert server.client.delete("/api/media/to-delete.mp4").status_code == 204
    assert _folder(server) == before - {"to-delete.mp4"}  # that one, nothing else
    assert "to-delete.mp4" not in {f["name"] for f in server.client.get("/api/media").json()["files"]}
    for name, status, code in (("to-delete.mp4", 404, "file_not_found"), ("demo.mp4", 400, "bad_media_name"),
                               (".hidden", 400, "bad_media_name")):  # fmt: skip
        r = server.client.delete(f"/api/media/{name}")
        assert r.status_code == status and r.json()["detail"]["code"] == code, r.text
    assert _folder(server) == before - {"to-delete.mp4"}
