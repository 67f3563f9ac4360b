"""Live video sources on loopback, for tests and benchmarks of live streams: MPEG-TS over HTTP and HLS played by
Debian's ffmpeg, and an IP camera's MJPEG."""

from __future__ import annotations

import contextlib
import functools
import http.server
import itertools
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import cv2
import numpy as np
import psutil

from testing.net import HOST, free_port
from testing.poll import until

#: Why the live sources cannot play here, or None: they are Debian's ffmpeg command (``.ci/run`` installs it).
NO_FFMPEG = None if shutil.which("ffmpeg") else "needs the ffmpeg command (apt-get install ffmpeg)"


class LiveSource:
    """A live HTTP MPEG-TS source: ffmpeg playing a file in real time, looping, listening for one client.
    ``start()`` returns once ffmpeg listens; ``stop()`` is the source going away; ``start()`` again is it coming
    back on the same URL."""

    def __init__(self, video: Path, port: int | None = None) -> None:
        self.video = video
        self.port = port or free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}/live.ts"

    def start(self) -> LiveSource:
        cmd = ["ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-re", "-stream_loop", "-1",
               "-i", str(self.video), "-c", "copy", "-f", "mpegts", "-listen", "1", self.url]  # fmt: skip
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        until(self._listening, 30, f"ffmpeg listening on {self.url}", 0.05)
        return self

    def _listening(self) -> bool:
        """Asked of the kernel, not by connecting: ffmpeg's ``-listen 1`` serves its first client only. It closes its
        listening socket once that client is in, and a stream reconnecting to a source that comes back can be in
        between two polls: a socket of ffmpeg's on the port, listening or connected, says it is up."""
        if self.proc.poll() is not None:
            raise RuntimeError(f"ffmpeg exited with {self.proc.returncode} before listening on {self.url}")
        with contextlib.suppress(psutil.NoSuchProcess):
            sockets = psutil.Process(self.proc.pid).net_connections("tcp")
            up = (psutil.CONN_LISTEN, psutil.CONN_ESTABLISHED)
            return any(s.status in up and s.laddr and s.laddr.port == self.port for s in sockets)
        return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def __enter__(self) -> LiveSource:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class LiveHls:
    """A live HLS source: ffmpeg playing a file in real time, looping, into a playlist of short segments that it keeps
    rolling (as a live encoder does), served over HTTP on loopback. A viewer gets a segment at a time: seconds of
    frames at once, then nothing."""

    def __init__(self, video: Path, segment_s: float = 1.0) -> None:
        self.video, self.segment_s = video, segment_s
        self.dir: Path | None = None  # made on entering
        self.proc: subprocess.Popen | None = None
        self.httpd: http.server.ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.httpd is not None
        return f"http://{HOST}:{self.httpd.server_address[1]}/live.m3u8"

    def __enter__(self) -> LiveHls:
        self.dir = Path(tempfile.mkdtemp(prefix="live-hls-"))
        playlist = self.dir / "live.m3u8"
        cmd = ["ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-re", "-stream_loop", "-1",
               "-i", str(self.video), "-c:v", "libx264", "-g", "15", "-f", "hls", "-hls_time", str(self.segment_s),
               "-hls_list_size", "4", "-hls_flags", "delete_segments", str(playlist)]  # fmt: skip
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        handler = functools.partial(_QuietFiles, directory=str(self.dir))
        self.httpd = http.server.ThreadingHTTPServer((HOST, 0), handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        until(lambda: playlist.exists() and playlist.read_text().count(".ts") >= 2, 30, "ffmpeg's first segments")
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        if self.httpd is not None:
            self.httpd.shutdown()
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)


class _QuietFiles(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


class LiveMjpeg:
    """An IP camera's MJPEG over HTTP (``multipart/x-mixed-replace``) on loopback: ``frames`` (RGB) as JPEGs, looping,
    ``fps`` a second. The stream states no rate, as such cameras' do not."""

    def __init__(self, frames: np.ndarray, fps: float) -> None:
        jpegs = [cv2.imencode(".jpg", cv2.cvtColor(f, cv2.COLOR_RGB2BGR))[1].tobytes() for f in frames]
        stop = threading.Event()

        class Camera(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the http.server API
                self.send_response(200)
                self.send_header("Content-Type", "multipart/x-mixed-replace; boundary=frame")
                self.end_headers()
                with contextlib.suppress(OSError):
                    for i in itertools.count():
                        if stop.is_set():
                            return
                        jpeg = jpegs[i % len(jpegs)]
                        head = f"--frame\r\nContent-Type: image/jpeg\r\nContent-Length: {len(jpeg)}\r\n\r\n"
                        self.wfile.write(head.encode() + jpeg + b"\r\n")
                        time.sleep(1 / fps)

            def log_message(self, *args: object) -> None:
                pass

        self.stop = stop
        self.httpd = http.server.ThreadingHTTPServer((HOST, 0), Camera)
        self.httpd.daemon_threads = True
        self.url = f"http://{HOST}:{self.httpd.server_address[1]}/camera.mjpg"

    def __enter__(self) -> LiveMjpeg:
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.httpd.shutdown()
