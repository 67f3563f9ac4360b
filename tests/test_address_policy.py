"""Every hop of a source obeys the address policy, through a real server that allows 127.0.0.2/32 only
(``OVERTIME_ALLOW_PRIVATE``): a redirect or an HLS playlist leading to 127.0.0.1 is refused like a direct 127.0.0.1
source, with ``private_address``, counted in ``overtime_sources_refused_total``, and 127.0.0.1 never sees a request.
The same hops inside 127.0.0.2 open: the refusals are about the address and nothing else."""

from __future__ import annotations

import pytest
from http_support import clip_sites

from testing.api import Api
from testing.server import small_server

pytestmark = [pytest.mark.realtime, pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def sites(tmp_path_factory):
    with clip_sites(tmp_path_factory.mktemp("sites")) as sites:
        yield sites


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    settings = {"OVERTIME_ALLOW_PRIVATE": "127.0.0.2/32", "OVERTIME_OPEN_TIMEOUT_S": "5"}
    server = small_server(tmp_path_factory.mktemp("policy"), settings=settings).start()
    try:
        with server.api() as client:
            yield client
    finally:
        server.stop()


@pytest.fixture(autouse=True)
def nothing_reaches_the_private_site(sites):
    sites.private.requests.clear()
    yield
    assert sites.private.requests == [], "a refused address was connected to"


def refusals(api: Api) -> float:
    return api.metrics().value("overtime_sources_refused_total", code="private_address")


def settled(api: Api, source: str) -> dict:
    """Create a stream on ``source``; its info once it opened the source or failed, after deleting it."""
    sid = api.create({"source": source, "fps": 10})["id"]
    try:
        return api.wait(sid, 60, "opened or failed", lambda s: s["source_info"] or s["state"] == "error")
    finally:
        api.delete(sid)


def test_a_private_source_is_refused_at_the_request_and_counted(api, sites):
    before = refusals(api)
    r = api.http.post("/api/streams", json={"source": f"{sites.private.url}/clip.ts"})
    assert r.status_code == 400 and r.json()["detail"]["code"] == "private_address", r.text
    assert refusals(api) == before + 1


@pytest.mark.parametrize("hop", ["redirect", "hls"])
def test_a_later_hop_to_a_private_address_is_refused_and_counted(api, sites, hop):
    allowed, private = sites.allowed.url, sites.private.url
    inside, away = {
        "redirect": (sites.allowed.redirect_to(f"{allowed}/clip.ts"), sites.allowed.redirect_to(f"{private}/clip.ts")),
        "hls": (f"{allowed}/local.m3u8", f"{allowed}/away.m3u8"),  # away.m3u8's second segment is on 127.0.0.1
    }[hop]
    opened = settled(api, inside)
    assert opened["source_info"].get("codec") == "h264", opened
    before = refusals(api)
    refused = settled(api, away)  # the request passes: its first hop is allowed
    assert refused["state"] == "error" and refused["error"]["code"] == "private_address", refused
    assert f"{private}/clip.ts" in refused["error"]["message"]
    assert refusals(api) == before + 1
