"""Loopback HTTP sites for the address-policy tests: files, redirects, and a record of every request."""

from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import parse_qs, quote, urlsplit

from models.streams import generate, write_mp4

CLIP_FRAMES = 20


class HttpSite:
    """An HTTP server on ``host`` (any of 127.0.0.0/8 binds on Linux) serving the files of ``root``;
    ``/redirect?to=URL`` answers 302 to URL, ``/loop`` redirects to itself. ``requests`` lists the path of every
    request it got."""

    def __init__(self, host: str, root: Path) -> None:
        self.requests: list[str] = []
        site = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *args, **kwargs) -> None:
                super().__init__(*args, directory=str(root), **kwargs)

            def do_GET(self) -> None:  # noqa: N802 - the http.server API
                site.requests.append(self.path)
                parts = urlsplit(self.path)
                if parts.path not in ("/redirect", "/loop"):
                    return super().do_GET()
                self.send_response(302)
                self.send_header("Location", parse_qs(parts.query)["to"][0] if parts.path == "/redirect" else "/loop")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self._httpd = http.server.ThreadingHTTPServer((host, 0), Handler)
        self._httpd.daemon_threads = True
        self.url = f"http://{host}:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    def redirect_to(self, target: str) -> str:
        """A URL on this site that redirects to ``target``."""
        return f"{self.url}/redirect?to={quote(target, safe='')}"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)

    def __enter__(self) -> HttpSite:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def playlist(*segments: str, seconds: float = 2.0) -> str:
    """A finished (VOD) HLS playlist of ``segments`` (relative or absolute URLs), ``seconds`` each."""
    lines = ["#EXTM3U", "#EXT-X-VERSION:3", f"#EXT-X-TARGETDURATION:{int(seconds + 0.999)}", "#EXT-X-MEDIA-SEQUENCE:0"]
    for segment in segments:
        lines += [f"#EXTINF:{seconds:.3f},", segment]
    return "\n".join([*lines, "#EXT-X-ENDLIST", ""])


@contextlib.contextmanager
def clip_sites(root: Path) -> Iterator[SimpleNamespace]:
    """The same files on an ``allowed`` site (127.0.0.2) and a ``private`` one (127.0.0.1): ``clip.ts``
    (``CLIP_FRAMES`` frames), ``local.m3u8`` (that clip) and ``away.m3u8`` (that clip, then the private site's)."""
    write_mp4(generate(32, CLIP_FRAMES, seed=2).frames, root / "clip.ts", fps=10)
    with HttpSite("127.0.0.2", root) as allowed, HttpSite("127.0.0.1", root) as private:
        (root / "local.m3u8").write_text(playlist("clip.ts"))
        (root / "away.m3u8").write_text(playlist("clip.ts", f"{private.url}/clip.ts"))
        yield SimpleNamespace(root=root, allowed=allowed, private=private)
