"""Source validation: the allow-list, the media-dir jail and the private-address rule."""

from __future__ import annotations

import pytest

from server.errors import SourceError
from server.sources import check_host, parse_source

ALL = {"http", "https", "rtsp", "rtsps", "file", "camera", "webcam", "demo"}


@pytest.fixture
def media(tmp_path):
    (tmp_path / "clip.mp4").write_bytes(b"x")
    (tmp_path.parent / "outside.mp4").write_bytes(b"x")
    (tmp_path / "link.mp4").symlink_to(tmp_path.parent / "outside.mp4")
    return tmp_path


def code(source: str, media, schemes=ALL, allow_private=False) -> str:
    with pytest.raises(SourceError) as exc:
        parse_source(source, media, schemes, allow_private)
    assert exc.value.message
    return exc.value.code


def test_accepted_sources(media):
    assert parse_source("file:clip.mp4", media, ALL, False).target == str(media / "clip.mp4")
    assert parse_source(f"file://{media}/clip.mp4", media, ALL, False).kind == "file"
    assert parse_source("camera:2", media, ALL, False).target == "/dev/video2"
    assert parse_source("webcam", media, ALL, False).live
    demo = parse_source("demo", media, ALL, False)
    assert demo.kind == "demo" and not demo.live
    url = parse_source("rtsp://127.0.0.1:8554/cam", media, ALL, allow_private=True)
    assert url.live and url.host == "127.0.0.1"


def test_refused_sources(media):
    assert code("ftp://example.com/a.mp4", media) == "scheme_not_allowed"
    assert code("gopher://x", media) == "scheme_not_allowed"
    assert code("demo", media, schemes={"http"}) == "scheme_not_allowed"
    assert code("camera:0", media, schemes={"http"}) == "scheme_not_allowed"
    assert code("clip.mp4", media) == "bad_source"
    assert code("camera:x", media) == "scheme_not_allowed"
    assert code("file:../outside.mp4", media) == "path_outside_media"
    assert code("file:///etc/passwd", media) == "path_outside_media"
    assert code("file:link.mp4", media) == "path_outside_media"  # a symlink out of the media dir
    assert code("file:nothing.mp4", media) == "file_not_found"
    assert code("http:///path", media) == "bad_source"


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "10.1.2.3", "192.168.0.10", "169.254.169.254", "::1"])
def test_private_addresses_need_permission(media, host):
    url = f"http://[{host}]/x" if ":" in host else f"http://{host}/x"
    assert code(url, media) == "private_address"
    assert parse_source(url, media, ALL, allow_private=True).host == host


def test_unresolvable_host_is_unreachable_at_connect_time(media):
    assert parse_source("http://no-such-host.invalid/x.ts", media, ALL, False).kind == "url"
    with pytest.raises(SourceError) as exc:
        check_host("no-such-host.invalid", allow_private=False)
    assert exc.value.code == "source_unreachable"
