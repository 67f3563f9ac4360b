"""How many tensor ops the service's learning step dispatches, and how many of them the GPU's own kernels fold into a
few launches: the variational refinement's solver (``models.variational_triton``), the window products
(``models.window_products_triton``) and the edge-aware fill's weights (``models.fill_triton``).

Counted on the CPU with those parts in their reference tensor ops (not the CPU's own compiled loops,
``models.variational_numba``, ``models.window_products_numba``, ``models.fill_numba``), as a GPU without its kernels
would launch them: a ``TorchDispatchMode`` counts the ops that compute (views and bare allocations launch nothing on a
GPU) in one steady step of the ``fast`` net learning as the service does (``bench.gpu_step.service_steps``), and which
of them ran inside each part. On a GPU each call of a part is as many launches as ``LAUNCHES`` says; the rest stay one
kernel or so per op, as ``bench.gpu`` counts them there.

    python -m bench.step_ops                 # 128x96 and 640x480, one stage: step-ops.{md,json}
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from bench.gpu_step import frames, service_steps
from bench.own_kernels import PARTS
from server.stream.sizing import parse_size
from testing.report import Run

#: Ops that launch no kernel on a GPU: allocations (a view is told by its schema).
ALLOCATIONS = ("empty", "empty_strided", "empty_like", "lift_fresh")


class OpCount(TorchDispatchMode):
    """Counts the computing ops dispatched, per ``part`` (what the step is in now: ``None`` outside the fused parts)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str | None] = Counter()
        self.calls: Counter[str] = Counter()
        self.part: str | None = None

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if not func.is_view and func.overloadpacket.__name__ not in ALLOCATIONS:
            self.ops[self.part] += 1
        return func(*args, **(kwargs or {}))

    def within(self, part: str, fn: Callable) -> Callable:
        """``fn``, its ops counted as ``part``'s and each call as one."""

        def counted(*args: Any, **kwargs: Any) -> Any:
            outer, self.part = self.part, part
            self.calls[part] += 1
            try:
                return fn(*args, **kwargs)
            finally:
                self.part = outer

        return counted


#: Launches per call of each part (``bench.own_kernels.PARTS``) with the GPU's kernels: the solver one kernel per
#: fixed-point round and one per half sweep (5 + 5 x 5 x 2), a window product one, a reach's colour weights one, a
#: verified reach's two (the warps' errors, then the windows' means).
LAUNCHES = {"solver": 5 + 5 * 5 * 2, "window dots": 1, "window mix": 1, "window spread": 1, "fill colours": 1,
            "fill verified": 2}  # fmt: skip


def count_step(size: tuple[int, int]) -> dict:
    """One steady learning step at ``size`` (after a few to fill the feed and settle the optimizer), its ops by part."""
    from models.flow_nets import build_flow_net
    from models.online import online_pipeline

    pairs = frames(size, 4, torch.device("cpu"))
    learning, inputs = service_steps(pairs)
    pipe = online_pipeline(build_flow_net("fast", init="pretrained"), pairs[0], 1, learning=learning)
    count = OpCount()
    patched = {(module, name): count.within(part, reference) for part, (module, name, reference) in PARTS.items()}
    originals = {key: getattr(*key) for key in patched}
    try:
        for (module, name), fn in patched.items():
            setattr(module, name, fn)
        with pipe:
            for step_input, target in inputs[:-1]:
                pipe.step(step_input, target=target)
            count.calls.clear()  # the calls of the steps before, whose ops were not counted
            step_input, target = inputs[-1]
            with count:
                pipe.step(step_input, target=target)
    finally:
        for (module, name), fn in originals.items():
            setattr(module, name, fn)
    total = sum(count.ops.values())
    parts = {part: {"ops": count.ops[part], "calls": count.calls[part]} for part in LAUNCHES}
    with_kernels = total - sum(p["ops"] for p in parts.values())
    with_kernels += sum(p["calls"] * LAUNCHES[part] for part, p in parts.items())
    return {"size": list(size), "ops": total, "parts": parts, "with_gpu_kernels": with_kernels}


def markdown(rows: list[dict]) -> str:
    lines = [
        "| size | tensor ops a step | "
        + " | ".join(f"in {part} (calls)" for part in LAUNCHES)
        + " | launches with the GPU's kernels | fewer |",
        "|---|---:|" + "---:|" * len(LAUNCHES) + "---:|---:|",
    ]
    for r in rows:
        parts = " | ".join(f"{r['parts'][part]['ops']} ({r['parts'][part]['calls']})" for part in LAUNCHES)
        lines.append(
            f"| {r['size'][0]}×{r['size'][1]} | {r['ops']} | {parts} | {r['with_gpu_kernels']} | "
            f"{1 - r['with_gpu_kernels'] / r['ops']:.0%} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=parse_size, action="append", help="WxH (repeatable; default 128x96 and 640x480)")
    p.add_argument("--out", default="step-ops", help="results file stem under bench/results/")
    args = p.parse_args(argv)
    sizes = args.size or [(128, 96), (640, 480)]
    report = Run()
    torch.set_num_threads(1)
    rows = [count_step(size) for size in sizes]
    report.write(args.out, "Tensor ops of the service's learning step, and launches with the GPU's own kernels",
                 markdown(rows), {"rows": rows})  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
