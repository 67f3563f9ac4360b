"""Running commands for the check: each failure becomes a ``CheckFailed`` that says what failed, so the command line
can end the run with one message instead of a traceback."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time

from testing.net import HOST


class CheckFailed(Exception):
    """A step or a check did not hold; the message says which and why."""


def log(message: str) -> None:
    """A progress line, timestamped and flushed: the check runs for minutes."""
    print(f"[docker-check {time.strftime('%H:%M:%S')}] {message}", flush=True)


def sh(args: list[str], *, timeout_s: float = 600, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    """Run a command, output captured; a failure raises CheckFailed with the command and its output's tail."""
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s, **kwargs)
    except subprocess.TimeoutExpired as exc:
        raise CheckFailed(f"{' '.join(args)}: no answer within {timeout_s:g} s") from exc
    if check and done.returncode != 0:
        raise CheckFailed(f"{' '.join(args)} failed ({done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}")
    return done


def docker(*args: str, timeout_s: float = 300, check: bool = True) -> str:
    """``docker ARGS``; its stdout, stripped."""
    return sh(["docker", *args], timeout_s=timeout_s, check=check).stdout.strip()


def image_exists(tag: str) -> bool:
    """Whether the engine holds an image tagged ``tag``."""
    return sh(["docker", "image", "inspect", tag], check=False).returncode == 0


def apt_install(packages: list[str]) -> None:
    """Install missing tools from Debian (as root only: the check never asks for a password)."""
    if os.geteuid() != 0:
        raise CheckFailed(f"missing {', '.join(packages)}: run the check as root (or apt-get install them)")
    log(f"apt-get install {' '.join(packages)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    sh(["apt-get", "update", "-q"], timeout_s=600, env=env)
    sh(["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages], timeout_s=1200, env=env)


def free_local_port(preferred: int) -> int:
    """``preferred`` when nothing listens on 127.0.0.1 there, else any free port."""
    for port in (preferred, 0):
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            with contextlib.suppress(OSError):
                s.bind((HOST, port))
                return s.getsockname()[1]
    raise CheckFailed("no free port on 127.0.0.1")
