"""Checkpoints, one per stream name, in a folder or at a URL every node of a cluster reaches (``fsspec``:
``s3://bucket/prefix``, ``gs://...``, or any filesystem fsspec knows), written so that a crash never leaves half of
one.

In a folder: write a temp file, fsync it, rename it over the old one, fsync the folder — a crash at any point leaves
either the old or the new checkpoint. At a URL: one write of the whole object (an object store's PUT stores all of
it or nothing). A folder shared by the nodes (NFS) works as a folder.
"""

from __future__ import annotations

import io
import os
import posixpath
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

import fsspec
import torch

NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}"
#: A folder (a path) or a URL.
Location = str | Path


def is_url(location: Location) -> bool:
    return "://" in str(location)


def checkpoint_path(directory: Location, name: str) -> Location:
    """Where stream ``name``'s checkpoint lives."""
    if not re.fullmatch(NAME_PATTERN, name) or ".." in name:
        raise ValueError(f"bad stream name {name!r}")
    if is_url(directory):
        return posixpath.join(str(directory).rstrip("/"), f"{name}.pt")
    return Path(directory) / f"{name}.pt"


def file_name(location: Location) -> str:
    return posixpath.basename(str(location))


def save_atomic(state: dict, location: Location) -> None:
    if is_url(location):
        data = io.BytesIO()
        torch.save(state, data)
        fs, path = fsspec.core.url_to_fs(str(location))
        fs.pipe_file(path, data.getvalue())
        return
    path = Path(location)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


@dataclass(frozen=True)
class Checkpoint:
    """A learner's state taken at one step, to be written: what it holds, where it goes, and the frames it had
    learned. Taking it and writing it are apart so that the write can run beside the frames that follow
    (``server.stream.learner.checkpoint_writer``)."""

    state: dict
    location: Location
    frames: int

    def write(self) -> None:
        save_atomic(self.state, self.location)


def read_bytes(location: Location) -> bytes | None:
    """The checkpoint's bytes; None when there is none."""
    if is_url(location):
        fs, path = fsspec.core.url_to_fs(str(location))
        return fs.cat_file(path) if fs.exists(path) else None
    path = Path(location)
    return path.read_bytes() if path.is_file() else None


class CheckpointUnreadable(Exception):
    """The bytes at a stream's checkpoint are not a stream's checkpoint: damaged (a disk's fault, a copy cut short), or
    another file put there. Final for the stream: another try reads the same bytes."""


def load(location: Location) -> dict | None:
    """The checkpoint at ``location``; None when there is none. A failure to read it (a network's, a disk's) passes
    through; bytes that are not a stream's checkpoint raise ``CheckpointUnreadable`` in words, whatever torch raised
    for them (a ``KeyError``, an ``EOFError``, a zip reader's ``RuntimeError``, an unpickling error)."""
    data = read_bytes(location)
    if data is None:
        return None
    try:
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:
        raise CheckpointUnreadable(_unreadable(location)) from exc
    if not isinstance(state, dict) or "pipeline" not in state:  # the learner's state (``Learner.take_checkpoint``)
        raise CheckpointUnreadable(_unreadable(location))
    return state


def _unreadable(location: Location) -> str:
    return (
        f"checkpoint {file_name(location)} cannot be read (it is damaged, or not a stream's checkpoint): start the "
        "stream under another name, or remove that file to start this name afresh"
    )
