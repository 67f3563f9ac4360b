"""What a worker measured before and need not measure again: small JSON files in the cache dir (safe to delete).

Why: profiling the layers to split a net into stages takes seconds on a loaded CPU, and a stream that starts at the
learning size an earlier stream of the same shape settled on needs no search. Both make the first picture come
sooner. A cache that cannot be read or written only costs that time again: it never fails a stream.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


class JsonCache:
    """One JSON object in ``path``: string keys to JSON values, each write atomic (temp file, rename)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path

    def get(self, key: str) -> Any:
        if self.path is None:
            return None
        try:
            return json.loads(self.path.read_text()).get(key)
        except (OSError, ValueError, AttributeError):
            return None

    def put(self, key: str, value: Any) -> None:
        if self.path is None:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            try:
                entries = json.loads(self.path.read_text())
            except (OSError, ValueError):
                entries = {}
            entries[key] = value
            fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent)
            with os.fdopen(fd, "w") as f:
                json.dump(entries, f, indent=1, sort_keys=True)
            os.replace(tmp, self.path)
        except OSError as exc:
            log.warning("cannot write the cache %s: %s", self.path, exc)


def key(*parts: object) -> str:
    """``key("fast", (160, 120), 2, "cpu")`` -> ``"fast|160x120|2|cpu"``."""
    return "|".join(f"{p[0]}x{p[1]}" if isinstance(p, tuple | list) else str(p) for p in parts)
