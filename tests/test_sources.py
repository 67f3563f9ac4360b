"""Source validation: the allow-list, the media-dir jail and the private-address rule."""

from __future__ import annotations

from ipaddress import ip_network

import pytest

from server.errors import SourceError
from server.stream.source.sources import AddressPolicy, check_host, parse_source, shown_source

ALL = {"http", "https", "rtsp", "rtsps", "file", "camera", "webcam", "demo"}
NONE = AddressPolicy()
EVERYTHING = AddressPolicy(allow_all=True)


@pytest.fixture
def media(tmp_path):
    (tmp_path / "clip.mp4").write_bytes(b"x")
    (tmp_path.parent / "outside.mp4").write_bytes(b"x")
    (tmp_path / "link.mp4").symlink_to(tmp_path.parent / "outside.mp4")
    return tmp_path


def code(source: str, media, schemes=ALL, policy=NONE) -> str:
    with pytest.raises(SourceError) as exc:
        parse_source(source, media, schemes, policy)
    assert exc.value.message
    return exc.value.code


def test_accepted_sources(media):
    assert parse_source("file:clip.mp4", media, ALL, NONE).target == str(media / "clip.mp4")
    assert parse_source(f"file://{media}/clip.mp4", media, ALL, NONE).kind == "file"
    assert parse_source("camera:2", media, ALL, NONE).target == "/dev/video2"
    assert parse_source("webcam", media, ALL, NONE).live
    demo = parse_source("demo", media, ALL, NONE)
    assert demo.kind == "demo" and not demo.live
    url = parse_source("rtsp://127.0.0.1:8554/cam", media, ALL, EVERYTHING)
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
    assert parse_source(url, media, ALL, EVERYTHING).host == host


def test_unresolvable_host_is_unreachable_at_connect_time(media):
    assert parse_source("http://no-such-host.invalid/x.ts", media, ALL, NONE).kind == "http"
    with pytest.raises(SourceError) as exc:
        check_host("no-such-host.invalid", NONE)
    assert exc.value.code == "source_unreachable"


def test_allowed_ranges_admit_only_their_addresses(media):
    policy = AddressPolicy(networks=(ip_network("127.0.0.2/32"), ip_network("fd00::/8")))
    assert parse_source("http://127.0.0.2:8080/x", media, ALL, policy).policy == policy
    assert parse_source("rtsp://[fd00::5]/cam", media, ALL, policy).host == "fd00::5"
    assert code("http://127.0.0.1:8080/x", media, policy=policy) == "private_address"
    assert code("http://10.0.0.1/x", media, policy=policy) == "private_address"
    assert check_host("127.0.0.2", policy) == ["127.0.0.2"]


def test_a_urls_password_is_never_shown_but_the_decoder_gets_it(media):
    camera = "rtsp://admin:s3cr:et@camera.example:554/stream?channel=1"
    assert shown_source(camera) == "rtsp://admin:***@camera.example:554/stream?channel=1"
    assert parse_source(camera, media, ALL, NONE).target == camera  # what the decoder connects with
    assert shown_source("http://viewer@camera.example/live.ts") == "http://viewer@camera.example/live.ts"  # no password
    assert shown_source("https://:token@cdn.example/index.m3u8") == "https://:***@cdn.example/index.m3u8"
    for other in ("demo", "webcam", "camera:0", "file:clip.mp4", "http://[::1/x"):  # the last does not parse
        assert shown_source(other) == other
    with pytest.raises(SourceError) as refused:
        parse_source("rtsp://admin:s3cret@/stream", media, ALL, NONE)
    assert "s3cret" not in refused.value.message and "admin:***@" in refused.value.message
