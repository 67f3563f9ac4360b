"""Atomic checkpoints, one file per stream name: write a temp file, fsync it, rename it over the old one, fsync
the directory — a crash at any point leaves either the old or the new checkpoint, never half of one."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

import torch

NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}"


def checkpoint_path(directory: Path, name: str) -> Path:
    if not re.fullmatch(NAME_PATTERN, name) or ".." in name:
        raise ValueError(f"bad stream name {name!r}")
    return Path(directory) / f"{name}.pt"


def save_atomic(state: dict, path: Path) -> None:
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


def load(path: Path) -> dict | None:
    if not path.is_file():
        return None
    return torch.load(path, map_location="cpu", weights_only=True)
