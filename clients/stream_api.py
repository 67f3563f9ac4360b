"""A small synchronous client of the service's HTTP API for command-line use: REST calls and the live frame feed.

REST goes through the standard library (no extra dependency for a handful of JSON calls); the WebSocket through
`websockets`' sync client. Failures become `ApiError`s carrying the HTTP status and the server's message.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

FINAL_STATES = {"ended", "error"}


class ApiError(Exception):
    """An API call failed; `status` is the HTTP status (0 when the server could not be reached)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def error_words(error: object) -> str:
    """{"code": "source_unreachable", "message": "connection refused"} -> "source unreachable: connection refused"."""
    if not error:
        return ""
    if isinstance(error, str):
        return error.replace("_", " ")
    if isinstance(error, dict):
        code = str(error.get("code") or "").replace("_", " ")
        message = str(error.get("message") or error.get("detail") or "")
        return f"{code}: {message}" if code and message else code or message
    return str(error)


def _detail(body: bytes) -> str:
    try:
        payload = json.loads(body)
    except ValueError:
        return body.decode(errors="replace").strip()
    detail = payload.get("detail", payload) if isinstance(payload, dict) else payload
    if isinstance(detail, list):  # FastAPI validation errors
        return "; ".join(f"{'.'.join(map(str, d.get('loc', [])[1:])) or 'body'}: {d.get('msg')}" for d in detail)
    return error_words(detail) if isinstance(detail, dict) else str(detail)


@dataclass
class Frame:
    """One processed frame: the server's metrics message and the images that followed it, by kind."""

    metrics: dict
    images: dict[str, bytes] = field(default_factory=dict)


class StreamApi:
    def __init__(self, base_url: str, token: str | None = None, timeout: float = 10.0):
        self.base = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def _call(self, method: str, path: str, body: dict | None = None, file: Path | None = None) -> object:
        """``body`` goes as JSON; ``file`` as the request's body itself, read as it is sent."""
        if file is not None:
            with open(file, "rb") as data:
                req = urllib.request.Request(self.base + path, data=data, method=method)
                req.add_header("Content-Type", "application/octet-stream")
                req.add_header("Content-Length", str(os.fstat(data.fileno()).st_size))
                return self._send(req)
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        return self._send(req)

    def _send(self, req: urllib.request.Request) -> object:
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as res:
                raw = res.read()
        except urllib.error.HTTPError as err:
            raise ApiError(err.code, _detail(err.read())) from None
        except (urllib.error.URLError, OSError) as err:
            reason = getattr(err, "reason", err)
            raise ApiError(0, f"server unreachable at {self.base}: {reason}") from None
        return json.loads(raw) if raw else None

    def create(self, spec: dict) -> dict:
        return self._call("POST", "/api/streams", spec)

    def media(self) -> dict:
        """The server's media folder: its ``files`` and ``max_upload_bytes``."""
        return self._call("GET", "/api/media")

    def put_media(self, file: Path, name: str) -> dict:
        """Send a video into the server's media folder as ``name``; a stream plays it as ``file:NAME``."""
        return self._call("PUT", f"/api/media/{urllib.parse.quote(name)}", file=file)

    def delete_media(self, name: str) -> None:
        """Delete the video ``name`` from the server's media folder (refused, 409, while a stream plays it)."""
        self._call("DELETE", f"/api/media/{urllib.parse.quote(name)}")

    def get(self, stream_id: str) -> dict:
        return self._call("GET", f"/api/streams/{urllib.parse.quote(stream_id)}")

    def delete(self, stream_id: str) -> None:
        self._call("DELETE", f"/api/streams/{urllib.parse.quote(stream_id)}")

    def ws_url(self, path: str, **params: str) -> str:
        url = urllib.parse.urlsplit(self.base + path)
        scheme = "wss" if url.scheme == "https" else "ws"
        query = urllib.parse.urlencode({**params, **({"token": self.token} if self.token else {})})
        return urllib.parse.urlunsplit((scheme, url.netloc, url.path, query, ""))

    def frames(self, stream_id: str, idle_timeout: float, images: list[str] | None = None) -> Iterator[Frame | dict]:
        """Yields `Frame`s, and the other messages (state, error, budget, note) as dicts, until the stream ends or the
        socket closes.

        Each metrics message is followed by its image(s): one overlay JPEG by default, else one of each of `images`
        (`overlay`, `frame`, `flow`: JPEGs; `flow16`, `flo`: the flow field), which the server names in each metrics
        message (`"images": [...]`). Raises TimeoutError after `idle_timeout` seconds without any message.
        """
        layout = ["overlay"]
        params = {"images": ",".join(images)} if images else {}
        try:
            path = f"/ws/streams/{urllib.parse.quote(stream_id)}"
            ws = connect(self.ws_url(path, **params), open_timeout=self.timeout, max_size=2**24)
        except InvalidStatus as err:
            raise ApiError(err.response.status_code, f"WebSocket refused ({err.response.status_code})") from None
        except OSError as err:
            raise ApiError(0, f"server unreachable at {self.base}: {err}") from None
        with ws:
            pending: Frame | None = None
            try:
                while True:
                    msg = ws.recv(timeout=idle_timeout)
                    if isinstance(msg, bytes):
                        if pending is None:
                            continue  # joined between a metrics message and its image
                        pending.images[layout[len(pending.images)]] = msg
                        if len(pending.images) == len(layout):
                            yield pending
                            pending = None
                        continue
                    data = json.loads(msg)
                    if isinstance(data.get("images"), list) and data["images"]:
                        layout = [str(kind) for kind in data["images"]]
                    if "frame" in data and "loss" in data:
                        pending = Frame(data)
                    else:
                        yield data
                        if data.get("state") in FINAL_STATES:
                            return
            except ConnectionClosed as err:
                if err.rcvd is not None and err.rcvd.code in (1008, 4401):
                    raise ApiError(401, err.rcvd.reason or "unauthorised") from None
                if err.rcvd is not None and err.rcvd.code == 4404:
                    raise ApiError(404, err.rcvd.reason or "no such stream") from None
                return
