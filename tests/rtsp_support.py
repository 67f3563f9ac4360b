"""An RTSP camera on loopback for the tests: ffmpeg publishes a looping clip, the service plays it.

ffmpeg can publish RTSP (``-f rtsp``, ANNOUNCE + RECORD) but cannot serve it, so ``RtspCamera`` is the small server in
between: the publisher's SDP answers the player's DESCRIBE, and the RTP packets the publisher sends interleaved on its
TCP connection (RFC 2326, 10.12) go to the player interleaved on its own, byte for byte. One publisher, one player.
"""

from __future__ import annotations

import socket
import socketserver
import subprocess
import threading
from pathlib import Path

SESSION = "1701"
ANNOUNCE_WAIT_S = 30.0


class RtspCamera(socketserver.ThreadingTCPServer):
    """``with RtspCamera(clip) as camera:`` plays ``clip`` in real time, looping, at ``camera.url``; leaving the block
    (or ``stop()``) is the camera going away: the player's connection closes and nothing listens any more."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, clip: Path) -> None:
        super().__init__(("127.0.0.1", 0), _Connection)
        self.url = f"rtsp://127.0.0.1:{self.server_address[1]}/live"
        self.clip = clip
        self.sdp: bytes | None = None
        self.announced = threading.Event()
        self._player: socket.socket | None = None
        self._send = threading.Lock()  # the player's socket carries replies and relayed frames
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)
        self._ffmpeg: subprocess.Popen | None = None

    def start(self) -> RtspCamera:
        self._thread.start()  # listening since __init__: ffmpeg's connection waits in the backlog at worst
        self._ffmpeg = subprocess.Popen(
            ["ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-re", "-stream_loop", "-1",
             "-i", str(self.clip), "-c", "copy", "-f", "rtsp", "-rtsp_transport", "tcp", self.url],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        return self

    def send(self, connection: socket.socket, data: bytes) -> None:
        with self._send:
            connection.sendall(data)

    def play(self, connection: socket.socket) -> None:
        with self._send:
            self._player = connection

    def relay(self, frame: bytes) -> None:
        """An interleaved RTP/RTCP frame from the publisher, to the player if one is playing."""
        with self._send:
            if self._player is None:
                return
            try:
                self._player.sendall(frame)
            except OSError:
                self._player = None

    def stop(self) -> None:
        if self._ffmpeg is not None and self._ffmpeg.poll() is None:
            self._ffmpeg.kill()
            self._ffmpeg.wait(10)
        self.shutdown()
        self.server_close()
        with self._send:
            if self._player is not None:
                self._player.shutdown(socket.SHUT_RDWR)  # the service sees the end of the stream now
                self._player = None

    def __enter__(self) -> RtspCamera:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _Connection(socketserver.StreamRequestHandler):
    """One RTSP connection: requests and interleaved frames, in any order."""

    server: RtspCamera
    publishing = False

    def handle(self) -> None:
        while first := self.rfile.read(1):
            if first == b"$":  # an interleaved frame: channel (1 byte), length (2 bytes), payload
                header = self.rfile.read(3)
                frame = first + header + self.rfile.read(int.from_bytes(header[1:], "big"))
                if self.publishing:
                    self.server.relay(frame)  # a player's RTCP reports go nowhere
                continue
            method, headers, body = self._request(first)
            self._answer(method, headers, body)

    def _request(self, first: bytes) -> tuple[str, dict[str, str], bytes]:
        method = (first + self.rfile.readline()).split(b" ", 1)[0].decode()
        headers: dict[str, str] = {}
        while (line := self.rfile.readline().strip()) != b"":
            name, _, value = line.decode().partition(":")
            headers[name.strip().lower()] = value.strip()
        return method, headers, self.rfile.read(int(headers.get("content-length", 0)))

    def _answer(self, method: str, headers: dict[str, str], body: bytes) -> None:
        extra, content = {}, b""
        if method == "OPTIONS":
            extra["Public"] = "OPTIONS, DESCRIBE, ANNOUNCE, SETUP, PLAY, RECORD, GET_PARAMETER, TEARDOWN"
        elif method == "ANNOUNCE":
            self.publishing = True
            self.server.sdp = body
            self.server.announced.set()
        elif method == "DESCRIBE":
            if not self.server.announced.wait(ANNOUNCE_WAIT_S):
                return self._reply(headers, "404 Not Found")
            extra |= {"Content-Type": "application/sdp", "Content-Base": f"{self.server.url}/"}
            content = self.server.sdp or b""
        elif method == "SETUP":
            extra |= {"Transport": headers.get("transport", ""), "Session": SESSION}
        elif method == "PLAY":
            extra["Session"] = SESSION
            self._reply(headers, "200 OK", extra)
            return self.server.play(self.connection)
        return self._reply(headers, "200 OK", extra, content)

    def _reply(self, headers: dict[str, str], status: str, extra: dict | None = None, body: bytes = b"") -> None:
        lines = [f"RTSP/1.0 {status}", f"CSeq: {headers.get('cseq', '0')}"]
        lines += [f"{k}: {v}" for k, v in (extra or {}).items()] + [f"Content-Length: {len(body)}", "", ""]
        self.server.send(self.connection, "\r\n".join(lines).encode() + body)
