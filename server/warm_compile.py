"""``python -m server.warm_compile``: compile the service's learning step ahead, into the cache its streams read.

Why: a stream with ``gpu_compile`` compiles its stages in the background (``stream.learner.compiled_twin``) and takes
the compiled step when it is ready; cold, that takes minutes of a GPU
(``bench/results/gpu-first-run/gpu-nvidia-h200.md``). Inductor keeps what it compiled under ``TORCHINDUCTOR_CACHE_DIR``,
which the learner process points into the service's ``cache_dir``: compiled once here for a (net, size, stages,
device), every later stream and restart at that size reads it. The stage split is part of what is compiled, so this
measures and caches it in the same ``splits.json`` a stream reads (``stream.learner.profile_cache``). ``make
warm-gpu`` runs it for the sizes a GPU stream starts at.

Prints one JSON line per size: the seconds until the compiled step was ready, and inductor's cache hits and misses
(a warm cache: hits, no misses).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from .stream.learner.learner import Learner, LearnerConfig
from .stream.learner.profile_cache import JsonCache
from .stream.sizing import Size, parse_size

#: How long one size may take to compile before the tool gives up on it (a cold compile: minutes).
TIMEOUT_S = 900.0


def warm(args: argparse.Namespace, size: Size, checkpoints: Path) -> dict:
    """Build a stream's learner at ``size`` with compiled stages and wait until they are compiled."""
    from torch._dynamo.utils import counters

    counters.clear()
    cfg = LearnerConfig(name=f"warm-{size[0]}x{size[1]}", model=args.model, init=args.init, stages=args.stages,
                        lr=None, schedule="partime", devices=(args.device,), checkpoint_path=checkpoints / "warm.pt",
                        compile_backend=args.backend)  # fmt: skip
    start = time.perf_counter()
    learner = Learner(cfg, size, JsonCache(args.cache_dir / "splits.json"))
    try:
        while not learner.compiled_ready and learner.compile_error is None:
            if time.perf_counter() - start > TIMEOUT_S:
                return {"size": f"{size[0]}x{size[1]}", "error": f"not compiled within {TIMEOUT_S:.0f} s"}
            time.sleep(0.1)
        seconds = time.perf_counter() - start
    finally:
        learner.close()
    inductor = counters["inductor"]
    return {
        "size": f"{size[0]}x{size[1]}",
        "stages": args.stages,
        "device": args.device,
        "seconds": round(seconds, 1),
        "error": learner.compile_error,
        "fxgraph_cache_hit": inductor["fxgraph_cache_hit"],
        "fxgraph_cache_miss": inductor["fxgraph_cache_miss"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=parse_size, action="append", required=True, help="WIDTHxHEIGHT (repeatable)")
    parser.add_argument("--device", default="cuda", help="where the streams learn (default cuda)")
    parser.add_argument("--cache-dir", type=Path, default=Path("cache"), help="the service's cache_dir")
    parser.add_argument("--model", default="fast")
    parser.add_argument("--init", default="pretrained")
    parser.add_argument("--stages", type=int, default=2, help="the service's default D")
    parser.add_argument("--backend", default="inductor", help="torch.compile's backend (the service's: inductor)")
    args = parser.parse_args(argv)
    if args.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            parser.error(f"--device {args.device}: no CUDA GPU here (--device cpu warms the CPU's compiled step)")
    args.cache_dir.mkdir(parents=True, exist_ok=True)
    # As the learner process sets it (``stream.learner.process``), before torch compiles anything.
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(args.cache_dir.resolve() / "inductor")
    failed = False
    with tempfile.TemporaryDirectory() as checkpoints:
        for size in args.size:
            result = warm(args, size, Path(checkpoints))
            failed |= result["error"] is not None
            print(json.dumps(result), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
