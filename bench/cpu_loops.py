"""What the CPU's compiled loops save against the tensor ops they replace: the variational refinement's solver
(``models.variational_numba``), the window products (``models.window_products_numba``) and the edge-aware fill's
neighbour weights (``models.fill_numba``).

Both measured on this machine, whose speed drifts by a tenth from one minute to the next, in one run and alternating:

* each call of a steady learning step of the service's learner (the ``fast`` net, its shipped weights, the pair shown
  and a pair of known motion made from it, as ``bench.gpu_step.service_steps`` feeds it) timed both ways on its own
  inputs, call after call, summed per step;
* whole learning steps of that learner (one thread, one stage), the kernels switched every ``--switch`` steps on the
  same pipeline: the median step either way.

    python -m bench.cpu_loops                # 128x96: bench/results/cpu-loops.{md,json}
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from bench.gpu_step import frames, service_steps
from bench.own_kernels import PARTS, SHIPPED, use
from server.stream.sizing import parse_size
from testing.report import Run


def per_call(pipe: Any, inputs: list, repeats: int) -> dict[str, dict[str, float]]:
    """Each switched call of one steady step, timed both ways on its own inputs (best of ``repeats``), summed."""
    calls: list[tuple[str, tuple]] = []

    def recording(part: str) -> Callable:
        def record(*args: Any) -> Any:
            calls.append((part, tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)))
            return SHIPPED[part](*args)

        return record

    for part, (module, name, _) in PARTS.items():
        setattr(module, name, recording(part))
    step_input, target = inputs
    pipe.step(step_input, target=target)
    use(kernels=True)
    totals: dict[str, dict[str, float]] = {}
    for part, args in calls:
        reference = PARTS[part][2]
        row = totals.setdefault(part, {"calls": 0, "loops_ms": 0.0, "tensor_ops_ms": 0.0})
        row["calls"] += 1
        for key, fn in (("loops_ms", SHIPPED[part]), ("tensor_ops_ms", reference)):
            best = float("inf")
            for _ in range(repeats):
                start = time.perf_counter()
                fn(*args)
                best = min(best, time.perf_counter() - start)
            row[key] += 1e3 * best
    return totals


def whole_steps(pipe: Any, inputs: list, rounds: int, switch: int) -> dict[str, float]:
    """Median learning step either way, the kernels switched every ``switch`` steps on the same pipeline."""
    seconds: dict[bool, list[float]] = {True: [], False: []}
    i = 0
    for _ in range(rounds):
        for loops in (True, False):
            use(loops)
            for _ in range(switch):
                step_input, target = inputs[i % len(inputs)]
                i += 1
                start = time.perf_counter()
                pipe.step(step_input, target=target)
                seconds[loops].append(time.perf_counter() - start)
    use(kernels=True)
    loops_ms, tensor_ops_ms = (1e3 * statistics.median(seconds[k]) for k in (True, False))
    return {"steps_each": rounds * switch, "loops_ms": loops_ms, "tensor_ops_ms": tensor_ops_ms}


def markdown(size: tuple[int, int], parts: dict, steps: dict) -> str:
    lines = [
        f"At {size[0]}x{size[1]}, one thread. *saves* = the tensor ops' time over the loops' (> 1: the loops are "
        "faster).",
        "",
        "| in one step | calls | loops ms | tensor ops ms | saves |",
        "|---|---:|---:|---:|---:|",
    ]
    for part, row in parts.items():
        lines.append(f"| {part} | {row['calls']} | {row['loops_ms']:.2f} | {row['tensor_ops_ms']:.2f} | "
                     f"{row['tensor_ops_ms'] / row['loops_ms']:.2f}x |")  # fmt: skip
    loops, tensor_ops = (sum(r[k] for r in parts.values()) for k in ("loops_ms", "tensor_ops_ms"))
    lines.append(f"| all of them | {sum(r['calls'] for r in parts.values())} | {loops:.2f} | {tensor_ops:.2f} | "
                 f"{tensor_ops / loops:.2f}x |")  # fmt: skip
    lines += [
        "",
        f"Whole learning steps, {steps['steps_each']} each way, alternating: median **{steps['loops_ms']:.1f} ms** "
        f"with the loops, {steps['tensor_ops_ms']:.1f} ms with the tensor ops "
        f"({steps['tensor_ops_ms'] / steps['loops_ms']:.2f}x).",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=parse_size, default=(128, 96), help="learning size WxH (default 128x96)")
    p.add_argument("--rounds", type=int, default=20, help="whole-step rounds, each way once a round")
    p.add_argument("--switch", type=int, default=3, help="steps each way before switching")
    p.add_argument("--repeats", type=int, default=5, help="timings of each call, the best kept")
    p.add_argument("--out", default="cpu-loops", help="results file stem under bench/results/")
    args = p.parse_args(argv)
    from models.flow_nets import build_flow_net
    from models.online import online_pipeline

    torch.set_num_threads(1)
    report = Run()
    pairs = frames(args.size, 24, torch.device("cpu"))
    learning, inputs = service_steps(pairs)
    pipe = online_pipeline(build_flow_net("fast", init="pretrained"), pairs[0], 1, learning=learning)
    with pipe:
        for step_input, target in inputs[:6]:  # the loops compiled or loaded, the optimizer settled
            pipe.step(step_input, target=target)
        parts = per_call(pipe, inputs[6], args.repeats)
        steps = whole_steps(pipe, inputs[7:], args.rounds, args.switch)
    data = {"size": list(args.size), "parts": parts, "steps": steps}
    report.write(
        args.out,
        "The CPU's compiled loops against the tensor ops they replace",
        markdown(args.size, parts, steps),
        data,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
