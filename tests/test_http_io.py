"""The decoder's HTTP client: every hop checked against the address policy (loopback sites, no service).

Only 127.0.0.2 is allowed here; Linux routes all of 127.0.0.0/8 to loopback, so a site on 127.0.0.1 plays the
private address that a redirect or a playlist must not reach.
"""

from __future__ import annotations

import http.server
import shutil
import socket
import ssl
import subprocess
import threading
from ipaddress import ip_network

import av
import pytest
from http_support import CLIP_FRAMES, clip_sites

from models.streams import generate, write_mp4
from server.errors import SourceError
from server.stream.source.http_io import DEMUXER_OPTIONS, MAX_REDIRECTS, HttpOpener
from server.stream.source.opening import video_stream
from server.stream.source.sources import AddressPolicy
from testing.sources import NO_FFMPEG

POLICY = AddressPolicy(networks=(ip_network("127.0.0.2/32"),))


@pytest.fixture(scope="module")
def sites(tmp_path_factory):
    with clip_sites(tmp_path_factory.mktemp("sites")) as sites:
        yield sites


@pytest.fixture
def opener(sites):
    sites.private.requests.clear()
    with HttpOpener(POLICY, open_timeout_s=5, read_timeout_s=5) as o:
        yield o
    assert sites.private.requests == [], "a refused address was connected to"


def refused(opener: HttpOpener, url: str) -> SourceError:
    with pytest.raises(SourceError) as exc:
        opener.open(url)
    return exc.value


def test_redirects_between_allowed_hosts_are_followed(sites, opener):
    twice = sites.allowed.redirect_to(sites.allowed.redirect_to(f"{sites.allowed.url}/clip.ts"))
    with opener.open(twice) as body:
        assert body.read() == (sites.root / "clip.ts").read_bytes()


def test_a_redirect_to_a_refused_address_is_refused(sites, opener):
    target = f"{sites.private.url}/clip.ts"
    error = refused(opener, sites.allowed.redirect_to(target))
    assert error.code == "private_address"
    assert f"redirects to {target}" in error.message and "127.0.0.1" in error.message


def test_hops_that_are_not_http_are_refused(sites, opener):
    assert refused(opener, sites.allowed.redirect_to("file:///etc/passwd")).code == "scheme_not_allowed"


def test_http_errors_and_endless_redirects(sites, opener):
    assert refused(opener, f"{sites.allowed.url}/missing.ts").code == "not_found"
    error = refused(opener, f"{sites.allowed.url}/loop")
    assert error.code == "source_unreachable" and f"more than {MAX_REDIRECTS}" in error.message
    assert sites.allowed.requests.count("/loop") >= MAX_REDIRECTS


def frames(url: str, opener: HttpOpener) -> int:
    """Open ``url`` as the decoder does and decode it to the end."""
    with av.open(url, options=DEMUXER_OPTIONS, io_open=opener.io_open) as container:
        assert container.format.name == "hls"
        return sum(1 for _ in container.decode(video=0))


def test_every_url_of_an_hls_playlist_goes_through_the_check(sites, opener):
    assert frames(f"{sites.allowed.url}/local.m3u8", opener) == CLIP_FRAMES
    assert opener.source_length == (sites.root / "local.m3u8").stat().st_size  # the playlist's: not its segments'


def test_the_source_bodys_stated_length_is_kept_as_the_sources(sites, opener):
    """A file over HTTP states its length (the decoder then reads it as a recording, whatever its format)."""
    with opener.open(sites.allowed.redirect_to(f"{sites.allowed.url}/clip.ts")) as body:
        body.read()
    assert opener.source_length == (sites.root / "clip.ts").stat().st_size  # the redirect's own body does not count
    with pytest.raises(SourceError) as exc:  # its second segment lives on 127.0.0.1
        frames(f"{sites.allowed.url}/away.m3u8", opener)
    assert exc.value.code == "private_address" and f"{sites.private.url}/clip.ts" in exc.value.message


def test_the_connection_goes_to_the_address_that_was_checked(sites, opener, monkeypatch):
    """DNS rebinding: a name that answers 127.0.0.2 to the check and 127.0.0.1 afterwards still reaches 127.0.0.2."""
    real = socket.getaddrinfo
    answers = iter(["127.0.0.2"])

    def rebinding(host, *args, **kwargs):
        if host == "video.test":
            return real(next(answers, "127.0.0.1"), *args, **kwargs)
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    port = sites.allowed.url.rsplit(":", 1)[1]
    with opener.open(f"http://video.test:{port}/clip.ts") as body:
        assert body.read() == (sites.root / "clip.ts").read_bytes()


@pytest.fixture
def tls_site(tmp_path):
    """A TLS server on 127.0.0.2 with a self-signed certificate for that address (an IP camera's): its URL and the
    certificate."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a certificate")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=camera", "-addext", "subjectAltName=IP:127.0.0.2"],
                   check=True, capture_output=True)  # fmt: skip
    httpd = http.server.ThreadingHTTPServer(("127.0.0.2", 0), http.server.BaseHTTPRequestHandler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"https://127.0.0.2:{httpd.server_address[1]}/live.ts", cert
    httpd.shutdown()


def test_a_server_whose_certificate_is_not_trusted_says_so(tls_site, opener):
    """The server answers, and the error must not say it does not."""
    error = refused(opener, tls_site[0])
    assert "answers, but its TLS certificate is not trusted (self-signed certificate)" in error.message, error.message


def test_an_authority_the_machine_trusts_is_trusted(tls_site, monkeypatch):
    """A private authority added to the machine's trust (here ``SSL_CERT_FILE``, as OpenSSL reads it) opens."""
    url, cert = tls_site
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    with HttpOpener(POLICY, open_timeout_s=5, read_timeout_s=5) as opener:
        error = refused(opener, url)
    assert error.message.endswith("the server answered HTTP 501"), error.message  # TLS passed: the server's answer


@pytest.mark.skipif(NO_FFMPEG is not None, reason=str(NO_FFMPEG))
@pytest.mark.parametrize("display_side, chosen", [(640, (128, 96)), (64, (64, 48)), (2000, (128, 96))])
def test_of_an_hls_streams_renditions_one_is_read_and_the_others_not_downloaded(sites, opener, display_side, chosen):
    """An adaptive HLS stream (a master playlist, a rendition per size): FFmpeg would download every rendition's
    segments; the decoder reads the smallest that fills the picture (else the largest) and discards the others."""
    folder = sites.root / "renditions"
    folder.mkdir(exist_ok=True)
    write_mp4(generate(32, 100, seed=2).frames, folder / "long.ts", fps=10)
    split = "[0:v]split=2[a][b];[a]scale=64:48[small];[b]scale=128:96[large]"
    subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-i", str(folder / "long.ts"),
                    "-filter_complex", split, "-map", "[small]", "-map", "[large]", "-c:v", "libx264", "-b:v", "100k",
                    "-g", "10", "-f", "hls", "-hls_time", "1", "-hls_playlist_type", "vod",
                    "-master_pl_name", "master.m3u8", "-var_stream_map", "v:0 v:1",
                    "-hls_segment_filename", str(folder / "v%v_%03d.ts"), str(folder / "v%v.m3u8")],
                   check=True)  # fmt: skip
    sites.allowed.requests.clear()
    with av.open(f"{sites.allowed.url}/renditions/master.m3u8", options=DEMUXER_OPTIONS, io_open=opener.io_open) as c:
        stream = video_stream(c, display_side)
        sizes = {(f.width, f.height) for f in c.decode(stream)}
    assert sizes == {chosen} and (stream.codec_context.width, stream.codec_context.height) == chosen
    other = "v0_" if chosen == (128, 96) else "v1_"
    segments = [path for path in sites.allowed.requests if path.endswith(".ts")]
    unread = [p for p in segments if other in p]  # those FFmpeg read while it probed the renditions, before the choice
    assert len(unread) <= 3 and len(segments) - len(unread) == 10, segments  # of 10 each
