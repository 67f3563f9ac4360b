"""The bundled demo video: generated on first use into the media dir by ``models.streams`` (ground-truth
motion over photos), so the repository carries no binary media."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

DEMO_SIZE = 128
DEMO_FRAMES = 300
DEMO_FPS = 15  # its own rate, which a stream on it follows: one a loaded 2-core machine holds at 128x128
_lock = threading.Lock()


def ensure_demo(path: Path, timeout_s: float = 300.0) -> Path:
    """Make ``path`` if it is missing (written to a temp name, then renamed: never a half-written demo)."""
    with _lock:
        if path.is_file():
            return path
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.stem}.partial.mp4")
        cmd = [sys.executable, "-m", "models.streams", "--out", str(tmp), "--size", str(DEMO_SIZE),
               "--frames", str(DEMO_FRAMES), "--fps", str(DEMO_FPS), "--seed", "0"]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=Path(__file__).parent.parent)
        if done.returncode != 0:
            tmp.unlink(missing_ok=True)
            raise RuntimeError(f"could not generate the demo video: {done.stderr.strip()[-500:]}")
        tmp.replace(path)
        return path
