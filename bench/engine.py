"""Engine benchmark: PARTIME's pixel-wise network (Table I), sequential vs partime with D stages.

Every ratio is measured within one run against a baseline measured in the same run (a 1-stage
pipeline, i.e. the plain loop, with the whole machine's intra-op threads), as the best of
interleaved rounds. Inference (no loss) and
learning (forward + backward + SGD update every frame); with and without a whole-step CUDA graph
where a GPU exists. Writes ``bench/results/engine-<device>.json`` and ``.md``.

    python -m bench.engine                 # defaults for the machine at hand
    python -m bench.engine --quick         # a short smoke run
"""

from __future__ import annotations

import argparse
import platform
import time

import torch

from models.paper_nets import pixelwise
from pipeline_core import Pipeline, balance
from testing.report import Run


def square_loss(out: torch.Tensor, _target: torch.Tensor | None) -> torch.Tensor:
    return out.pow(2).mean()


def frames_per_second(pipe: Pipeline, x: torch.Tensor, frames: int) -> float:
    start = time.perf_counter()
    for _ in range(frames):
        pipe.step(x)
    return frames / (time.perf_counter() - start)


def best_fps(ways: dict[str, tuple[Pipeline, int]], x: torch.Tensor, frames: int, rounds: int) -> dict[str, float]:
    """Each way's (pipeline, intra-op threads) best of ``rounds`` interleaved rounds: on a shared machine
    other load only ever slows a round down (``timeit``'s reasoning), and interleaving spreads it over all ways."""
    threads = torch.get_num_threads()
    for pipe, _ in ways.values():
        for _ in range(2 * pipe.depth + 2):  # fill, capture graphs, warm caches
            pipe.step(x)
    fps = {name: 0.0 for name in ways}
    try:
        for _ in range(rounds):
            for name, (pipe, way_threads) in ways.items():
                torch.set_num_threads(way_threads)  # a 1-stage pipeline runs in this thread
                fps[name] = max(fps[name], frames_per_second(pipe, x, frames))
    finally:
        torch.set_num_threads(threads)
    return fps


def measure(args: argparse.Namespace, device: str) -> list[dict]:
    rows = []
    graphs = [False, True] if device == "cuda" else [False]
    cores = torch.get_num_threads()
    for res in args.resolutions:
        for outputs in args.outputs:
            torch.manual_seed(0)
            model = pixelwise(args.layers, 32, outputs)
            x = torch.rand(1, 3, res, res, device=device)
            for mode in ("inference", "learning"):
                loss = square_loss if mode == "learning" else None
                opt = lambda p: torch.optim.SGD(p, lr=1e-6)  # noqa: E731 - tiny: keep the net stable
                splits = {d: balance(model, x, d, [device], loss) for d in args.stages}
                for graph in graphs:
                    kw = dict(devices=[device], loss_fn=loss, optimizer=opt, cuda_graph=graph)
                    pipes = {1: Pipeline(model, x, stages=1, **kw)}
                    pipes |= {d: Pipeline(model, x, balance=splits[d], **kw) for d in args.stages}
                    ways = {str(d): (pipe, cores) for d, pipe in pipes.items()}
                    if device == "cpu":  # the plain loop on one core: the compute one stage thread gets
                        ways["1t"] = (pipes[1], 1)
                    try:
                        fps = best_fps(ways, x, args.frames, args.rounds)
                    finally:
                        for pipe in pipes.values():
                            pipe.close()
                    row = {"R": res, "F": outputs, "mode": mode, "cuda_graph": graph, "sequential_fps": fps["1"]}
                    if "1t" in fps:
                        row["sequential_1thread_fps"] = fps["1t"]
                    for d in args.stages:
                        row |= {f"D{d}_fps": fps[str(d)], f"D{d}_speedup": fps[str(d)] / fps["1"]}
                        row[f"D{d}_balance"] = splits[d]
                        if "1t" in fps:
                            row[f"D{d}_speedup_vs_1thread"] = fps[str(d)] / fps["1t"]
                    rows.append(row)
                    print(format_row(row, args.stages), flush=True)
    return rows


def format_row(row: dict, stages: list[int]) -> str:
    one = row.get("sequential_1thread_fps")
    cells = [str(row["R"]), str(row["F"]), row["mode"], "yes" if row["cuda_graph"] else "no"]
    cells += [f"{row['sequential_fps']:.1f}", f"{one:.1f}" if one else "-"]
    for d in stages:
        vs_one = f", {row[f'D{d}_speedup_vs_1thread']:.2f}x vs 1 thread" if one else ""
        cells.append(f"{row[f'D{d}_fps']:.1f} ({row[f'D{d}_speedup']:.2f}x{vs_one}) {row[f'D{d}_balance']}")
    return "| " + " | ".join(cells) + " |"


def table(rows: list[dict], stages: list[int]) -> str:
    head = ["R", "F", "mode", "CUDA graph", "sequential fps", "sequential 1 thread"]
    head += [f"D={d} fps (speed-up) balance" for d in stages]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + [format_row(r, stages) for r in rows])


def main(argv: list[str] | None = None) -> None:
    cuda = torch.cuda.is_available()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if cuda else "cpu", choices=["cpu", "cuda"])
    parser.add_argument("--resolutions", type=lambda s: [int(v) for v in s.split(",")], default=None)
    parser.add_argument("--outputs", type=lambda s: [int(v) for v in s.split(",")], default=[1, 10])
    parser.add_argument("--stages", type=lambda s: [int(v) for v in s.split(",")], default=None)
    parser.add_argument("--layers", type=int, default=None, help="conv layers (paper: 150)")
    parser.add_argument("--frames", type=int, default=None, help="timed frames per configuration")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; each way's best is kept")
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    args = parser.parse_args(argv)
    gpu = args.device == "cuda"
    args.resolutions = args.resolutions or ([256, 1024] if gpu else [64, 128])
    args.stages = args.stages or ([2, 4] if gpu else [2])
    args.layers = args.layers or (150 if gpu else 16)
    args.frames = args.frames or (200 if gpu else 40)
    if args.quick:
        args.resolutions, args.outputs, args.layers, args.frames, args.rounds = args.resolutions[:1], [1], 8, 15, 1

    device_name = torch.cuda.get_device_name() if gpu else f"{platform.processor() or 'cpu'} x{torch.get_num_threads()}"
    print(f"pixel-wise net: {args.layers} layers, 5x5 convs, 32 channels on {device_name}")
    print(table([], args.stages))
    run = Run()
    rows = measure(args, args.device)
    config = {k: v for k, v in vars(args).items() if k != "quick"}
    suffix = "-quick" if args.quick else ""
    run.write(
        f"engine-{args.device}{suffix}",
        f"Engine benchmark on {device_name}",
        f"{args.layers}-layer pixel-wise network.\n\n{table(rows, args.stages)}",
        {"device": device_name, "config": config, "rows": rows},
    )


if __name__ == "__main__":
    main()
