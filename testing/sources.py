"""Live video sources on loopback, played by Debian's ffmpeg, for tests and benchmarks of live streams."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from pathlib import Path

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
