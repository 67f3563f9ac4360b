"""The browser client, end to end: real headless Chromium (Debian's) driven by Playwright, against a real server.

Screenshots land in $OVERTIME_SCREENSHOTS (`make screenshots` sets bench/results, where they are written through
``testing.report.Run`` like every result) or /tmp/overtime-screens, so a test run never rewrites tracked files.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

import av
import cv2
import numpy as np
import pytest

from models.streams import generate, write_mp4
from testing.report import Run
from testing.server import ServerProcess

sync_api = pytest.importorskip("playwright.sync_api")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
if not Path(CHROMIUM).exists():
    pytest.skip("Debian's chromium is not installed (apt-get install chromium)", allow_module_level=True)

pytestmark = [pytest.mark.realtime, pytest.mark.slow]
# Loopback sources allowed (the unreachable-URL case), no stream of the server's own, and patience with
# stream start-up on a loaded 2-core box.
SERVER_FLAGS = ("--allow-private", "--no-demo-stream", "--read-timeout-s", "60", "--max-upload-mb", "1")
# Elsewhere one folder, overwritten by each run, rather than a new one left in /tmp each time.
RESULTS = Path(os.environ.get("OVERTIME_SCREENSHOTS") or Path(tempfile.gettempdir()) / "overtime-screens")
SHOTS = Run(command="make screenshots", directory=RESULTS)


def shoot(page, name: str) -> None:
    """A full-page screenshot under RESULTS, with its provenance (``Run.png``)."""
    SHOTS.png(name, page.screenshot(full_page=True))


ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--use-fake-device-for-media-stream",
    "--use-fake-ui-for-media-stream",
]
UNREACHABLE = "http://127.0.0.1:9/nothing.mp4"  # the discard port: nothing listens, connection refused

# Page-side probes: the live canvas's pixel statistics, and whether a chart's canvas has anything drawn on it.
CANVAS_STATS = """sel => {
  const c = document.querySelector(sel);
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  let sum = 0, sq = 0, hash = 0, n = 0;
  for (let i = 0; i < d.length; i += 16) { const v = d[i] + d[i + 1] + d[i + 2]; sum += v; sq += v * v; n++;
    hash = (hash * 31 + v) | 0; }
  const mean = sum / n; return { std: Math.sqrt(sq / n - mean * mean), hash };
}"""
CHART_INK = """sel => {
  const c = document.querySelector(sel + ' canvas');
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  let ink = 0; for (let i = 3; i < d.length; i += 4) if (d[i] > 0) ink++; return ink;
}"""


def fake_camera_y4m(path: Path, frames: int = 150) -> Path:
    """A textured scene panning diagonally, 1 px per frame: real, learnable motion for the webcam stream."""
    rng = np.random.default_rng(0)
    texture = cv2.GaussianBlur(rng.integers(0, 255, (480, 480, 3), dtype=np.uint8), (0, 0), 3)
    texture = cv2.normalize(texture, None, 0, 255, cv2.NORM_MINMAX)
    with av.open(str(path), "w", format="yuv4mpegpipe") as out:
        stream = out.add_stream("rawvideo", rate=10)
        stream.width, stream.height, stream.pix_fmt = 160, 120, "yuv420p"
        for i in range(frames):
            crop = np.ascontiguousarray(texture[20 + i : 140 + i, 20 + i : 180 + i])
            out.mux(stream.encode(av.VideoFrame.from_ndarray(crop, format="rgb24").reformat(format="yuv420p")))
        out.mux(stream.encode(None))
    return path


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with ServerProcess(tmp_path_factory.mktemp("server"), *SERVER_FLAGS) as srv:
        yield srv.url


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    camera = fake_camera_y4m(tmp_path_factory.mktemp("camera") / "camera.y4m")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=[*ARGS, f"--use-file-for-fake-video-capture={camera}"])
        yield b
        b.close()


@pytest.fixture
def page(browser, server):
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.goto(server)
    yield pg
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


def delete_all(server: str) -> None:
    with urllib.request.urlopen(server + "/api/streams", timeout=30) as res:
        body = json.load(res)
    for s in body if isinstance(body, list) else body["streams"]:
        urllib.request.urlopen(urllib.request.Request(f"{server}/api/streams/{s['id']}", method="DELETE"), timeout=60)


def start(page, kind: str, url: str = "", fps: int | None = 10, init: str | None = None) -> str:
    page.click(f"label[for=kind-{kind}]")
    if init is not None:
        page.select_option("#init", init)
    if url:
        page.fill("#source-url", url)
    page.fill("#fps", "" if fps is None else str(fps))
    page.click("#start-button")
    page.wait_for_url("**/?stream=*", timeout=15_000)
    return page.url.split("stream=")[1]


def wait_for_points(page, chart: str, n: int, timeout_s: float) -> None:
    """Waits until a chart holds n points; on timeout saves what the page showed and says what state it was in."""
    enough = f"() => +document.querySelector('{chart}').dataset.points >= {n}"
    try:
        page.wait_for_function(enough, timeout=timeout_s * 1e3)
    except sync_api.TimeoutError:
        shoot(page, "client-failure.png")
        state, error = page.inner_text("#live-state"), page.inner_text("#live-error")
        points = page.get_attribute(chart, "data-points")
        message = f"{chart}: {points} of {n} points after {timeout_s} s; state {state!r}, error {error!r}"
        raise AssertionError(message) from None


def losses(page) -> list[float]:
    return page.evaluate("() => window.overtime.charts.loss.data[1]")


def test_demo_stream_draws_overlay_loss_and_budget(page, server):
    stream_id = start(page, "demo")
    wait_for_points(page, "#chart-loss", 20, timeout_s=150)
    first = page.evaluate(CANVAS_STATS, "#view")
    page.wait_for_timeout(600)
    second = page.evaluate(CANVAS_STATS, "#view")
    assert first["std"] > 5 and second["std"] > 5, "the live canvas is blank"
    assert first["hash"] != second["hash"], "the live canvas does not change"
    assert int(page.get_attribute("#chart-budget", "data-points")) >= 20
    assert page.evaluate(CHART_INK, "#chart-budget") > 500, "the ΔP/ΔS chart is not drawn"
    assert page.evaluate(CHART_INK, "#chart-loss") > 500
    assert len(page.locator("#stage-bars .stage-bar").all()) >= 3  # the frame's work, the step, at least one stage
    assert page.locator("#stream-list .stream-item.selected").get_attribute("data-id") == stream_id
    # The picture is the source's own (the demo is 128x128), whatever size the network learns at; the loss chart
    # draws the zero-flow baseline; the legend says the stream's colour scale; the budget is said in words.
    picture = page.evaluate("() => { const f = window.overtime.view.images.frame; return [f.width, f.height]; }")
    assert picture == [128, 128]
    assert any(v is not None for v in page.evaluate("() => window.overtime.charts.loss.data[3]"))
    assert "px/frame" in page.inner_text("#legend-scale") and "–" not in page.inner_text("#legend-scale")
    page.wait_for_function("() => /learning at \\d+×\\d+/.test(document.querySelector('#budget-note').textContent)")
    shoot(page, "client-demo.png")

    # The server sends the frame and the flow apart: raw / flow side by side, with arrows, is drawn.
    assert page.is_enabled("#mode-split") and page.is_enabled("#arrows") and page.is_enabled("#opacity")
    page.click("label[for=mode-split]")
    page.check("#arrows")
    page.wait_for_timeout(600)
    split = page.evaluate(CANVAS_STATS, "#view")
    assert split["std"] > 5 and split["hash"] not in (first["hash"], second["hash"])
    shoot(page, "client-split.png")
    page.click("label[for=mode-overlay]")

    with page.expect_download(timeout=30_000) as download:
        page.click("#stream-list .stream-item.selected button:has-text('Checkpoint')")
    assert download.value.suggested_filename.endswith(".pt")
    assert "checkpoint saved" in page.inner_text("#toast")

    # Deep link: a fresh page on /?stream=<id> shows that stream; a fresh page on / opens the running one. Both draw
    # the charts' history at once (the server keeps it), not only the frames that arrive after they opened.
    seen = int(page.get_attribute("#chart-loss", "data-points"))
    for url in (f"{server}/?stream={stream_id}", server):
        other = page.context.new_page()
        other.goto(url)
        wait_for_points(other, "#chart-loss", seen, timeout_s=10)
        assert other.url.endswith(f"?stream={stream_id}")
        other.close()

    phone = page.context.browser.new_context(viewport={"width": 390, "height": 844}, device_scale_factor=2)
    mobile = phone.new_page()
    mobile.goto(f"{server}/?stream={stream_id}")
    wait_for_points(mobile, "#chart-loss", 10, timeout_s=30)
    assert mobile.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth + 1"), "sideways scroll"
    shoot(mobile, "client-phone.png")
    phone.close()
    delete_all(server)


def test_webcam_frames_are_learned_from(page, server):
    """From scratch, on the browser's camera (``fake_camera_y4m``): the learner steps on the frames the page sends (its
    checkpoint counts them), and over the last 15 frames its flow explains the pairs clearly better than zero flow on
    the same pairs. What learning buys is the server's tests' (tests/test_server.py holds a stream to its frozen
    start): on this panning texture the frozen start already explains the pairs as well as the learner does ("vs start"
    read 1.00x and 0.91x), and a falling loss was a coin toss decided by the fake camera's jumps."""
    sid = start(page, "webcam", fps=5, init="scratch")
    wait_for_points(page, "#chart-loss", 50, timeout_s=150)
    chart = page.evaluate("() => window.overtime.charts.loss.data")
    request = urllib.request.Request(f"{server}/api/streams/{sid}/checkpoint", method="POST")
    with urllib.request.urlopen(request, timeout=60) as res:
        saved = json.load(res)
    shoot(page, "client-webcam.png")
    delete_all(server)
    assert saved["frames"] >= 45, saved
    learned, zero = (np.median([v for v in chart[i][-15:] if v is not None]) for i in (1, 3))
    assert learned < 0.9 * zero, f"webcam: learned {learned:.4g} against zero flow's {zero:.4g}: {chart[1]}, {chart[3]}"


RECENT_TIMINGS = """async () => {
  const { RecentTimings } = await import("./js/budget_bars.js");
  const recent = new RecentTimings(2000);
  const frame = (work, stages) => ({ work_s: work, dp_s: work / 2, stage_dp_s: stages, ds_s: 0.1 });
  recent.push(0, frame(0.05, [0.02, null]));
  recent.push(1000, frame(0.15, [0.04, 0.03]));
  const both = recent.mean();
  recent.push(2500, frame(0.09, [0.06, 0.05]));  // the first frame is now older than 2 s
  const later = recent.mean();
  recent.push(2600, frame(0.07, [0.01]));  // a rebuilt pipeline with one stage starts over
  return { both, later, rebuilt: recent.mean() };
}"""


def test_the_budget_readouts_average_the_last_two_seconds_of_frames(page):
    r = page.evaluate(RECENT_TIMINGS)
    assert r["both"]["work"] == pytest.approx(0.10) and r["both"]["step"] == pytest.approx(0.05)
    assert r["both"]["stages"] == pytest.approx([0.03, 0.03]), "a stage's mean is over the frames that timed it"
    assert r["both"]["ds"] == pytest.approx(0.1)
    assert r["later"]["work"] == pytest.approx(0.12) and r["later"]["stages"] == pytest.approx([0.05, 0.04])
    assert r["rebuilt"]["work"] == pytest.approx(0.07) and r["rebuilt"]["stages"] == pytest.approx([0.01])


def test_unreachable_url_shows_its_error(page, server):
    start(page, "url", UNREACHABLE)
    banner = page.locator("#live-error")
    banner.wait_for(state="visible", timeout=30_000)
    text = banner.inner_text().lower()
    assert "unreachable" in text or "refused" in text, text
    assert "_" not in text, f"error code not put into words: {text}"
    item = page.locator("#stream-list .stream-item .err")
    item.wait_for(state="visible", timeout=10_000)
    shoot(page, "client-bad-url.png")
    delete_all(server)


def test_what_a_stream_did_on_its_own_is_said(page, server):
    """The stream's notes (it went back to its best weights, a loss was not a number) under its title: the newest
    three, and how many came before. The server's list is given notes on its way to the page."""
    request = urllib.request.Request(
        f"{server}/api/streams", json.dumps({"source": UNREACHABLE}).encode(), {"content-type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as res:
        stream_id = json.load(res)["id"]
    notes = [f"frame {100 * i}: learning fell behind its start, so it went back to its best weights" for i in range(5)]

    def with_notes(route):
        streams = route.fetch().json()
        route.fulfill(json=[{**s, "notes": notes} if s["id"] == stream_id else s for s in streams])

    page.route("**/api/streams", with_notes)
    page.goto(f"{server}/?stream={stream_id}")
    page.locator("#stream-notes").wait_for(state="visible", timeout=10_000)
    assert page.locator("#stream-notes li").all_inner_texts() == ["2 earlier", *notes[2:]]
    page.unroute("**/api/streams")
    delete_all(server)


def test_a_video_from_this_computer_is_sent_played_and_deleted(page, server, tmp_path):
    """The File tab sends the video into the server's media folder (under its name with what a media file's name
    cannot hold as '-'), then plays it as a file: source; one over the server's limit is refused before it is sent.
    The tab lists the folder's videos; one is deleted on a second click, not while a stream plays it."""
    clip = tmp_path / "holiday clip.mp4"
    write_mp4(generate(64, 30, seed=6).frames, clip, fps=15)
    page.click("label[for=kind-file]")
    assert page.locator("#source-url").is_hidden() and page.locator("#loop").is_visible()
    large = tmp_path / "large.mp4"
    large.write_bytes(b"\0" * (2**20 + 1))
    page.set_input_files("#source-file", str(large))
    page.click("#start-button")
    error = page.locator("#form-error")
    error.wait_for(state="visible", timeout=10_000)
    assert "the server takes videos of at most 1.0 MB" in error.inner_text()
    page.set_input_files("#source-file", str(clip))
    page.fill("#fps", "10")
    page.check("#loop")  # it plays until deleted
    page.click("#start-button")
    page.wait_for_url("**/?stream=*", timeout=30_000)
    stream_id = page.url.split("stream=")[1]
    with urllib.request.urlopen(f"{server}/api/streams/{stream_id}", timeout=30) as res:
        assert json.load(res)["source"] == "file:holiday-clip.mp4"
    with urllib.request.urlopen(f"{server}/api/media", timeout=30) as res:
        names = {f["name"] for f in json.load(res)["files"]}
    assert "holiday-clip.mp4" in names and "large.mp4" not in names  # the large one never left this computer
    page.click("label[for=kind-url]")  # the URL field now suggests it, as every video in the media folder
    suggested = "document.querySelectorAll('#media-files option[value=\"file:holiday-clip.mp4\"]').length"
    page.wait_for_function(f"() => {suggested} === 1", timeout=10_000)
    page.click("label[for=kind-file]")
    row = page.locator("#media-list li", has_text="holiday-clip.mp4")
    row.locator("button").click()
    assert row.locator("button").inner_text() == "Delete?"  # asked again: nothing deleted yet
    row.locator("button").click()
    error.wait_for(state="visible", timeout=10_000)
    assert "media in use: streams play this video" in error.inner_text()
    delete_all(server)
    row.locator("button").click()
    row.locator("button").click()
    row.wait_for(state="detached", timeout=10_000)
    with urllib.request.urlopen(f"{server}/api/media", timeout=30) as res:
        assert "holiday-clip.mp4" not in {f["name"] for f in json.load(res)["files"]}


def test_the_file_tab_sends_a_video_once_and_never_over_another(page, server, tmp_path):
    """A video the media folder holds already (the same name and size) is played without sending it again; beside
    another video of that name the page sends its own as NAME-2 (never replacing a video someone sent)."""
    mine, other = tmp_path / "mine.mp4", tmp_path / "other.mp4"
    write_mp4(generate(64, 12, seed=7).frames, mine, fps=15)
    write_mp4(generate(64, 6, seed=8).frames, other, fps=15)
    assert mine.stat().st_size != other.stat().st_size
    sent: list[str] = []
    page.on("request", lambda r: sent.append(r.url.rsplit("/", 1)[1]) if r.method == "PUT" else None)
    send = """async ([b64, name]) => {
        const { sendVideo } = await import("./js/media.js");
        const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
        return sendVideo(new File([bytes], name), document.createElement("button"));
    }"""
    b64 = {path: base64.b64encode(path.read_bytes()).decode() for path in (mine, other)}
    try:
        assert page.evaluate(send, [b64[other], "my clip.mp4"]) == "file:my-clip.mp4"
        assert page.evaluate(send, [b64[other], "my clip.mp4"]) == "file:my-clip.mp4"
        assert sent == ["my-clip.mp4"], "the same name and size is not sent again"
        assert page.evaluate(send, [b64[mine], "my clip.mp4"]) == "file:my-clip-2.mp4"
        assert sent == ["my-clip.mp4", "my-clip-2.mp4"]
        with urllib.request.urlopen(f"{server}/api/media", timeout=30) as res:
            sizes = {f["name"]: f["size_bytes"] for f in json.load(res)["files"]}
        assert sizes["my-clip.mp4"] == other.stat().st_size and sizes["my-clip-2.mp4"] == mine.stat().st_size
    finally:
        for name in ("my-clip.mp4", "my-clip-2.mp4"):
            delete = urllib.request.Request(f"{server}/api/media/{name}", method="DELETE")
            with contextlib.suppress(urllib.error.HTTPError):
                urllib.request.urlopen(delete, timeout=30)


def test_rejected_source_shows_server_message(page):
    page.click("label[for=kind-url]")
    page.fill("#source-url", "ftp://example.com/video.mp4")
    page.click("#start-button")
    error = page.locator("#form-error")
    error.wait_for(state="visible", timeout=10_000)
    assert "ftp" in error.inner_text().lower()


def test_token_is_asked_once_per_tab(browser, tmp_path):
    with ServerProcess(tmp_path, *SERVER_FLAGS, token="s3cret") as srv:
        url = srv.url
        context = browser.new_context()
        pg = context.new_page()
        pg.goto(url)
        pg.locator("#token-dialog").wait_for(state="visible", timeout=10_000)
        pg.fill("#token-input", "s3cret")
        pg.click("#token-form button.primary")
        pg.wait_for_function("() => document.querySelector('#server-status').dataset.state === 'ok'", timeout=10_000)
        pg.reload()  # same tab: the token is remembered, nothing is asked
        pg.wait_for_function("() => document.querySelector('#server-status').dataset.state === 'ok'", timeout=10_000)
        assert not pg.locator("#token-dialog").is_visible()
        assert pg.evaluate("() => sessionStorage.getItem('overtime.token')") == "s3cret"
        context.close()
