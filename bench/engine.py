"""Engine benchmark: PARTIME's pixel-wise network (Table I), sequential vs partime with D stages.

Every ratio is measured within one run against a baseline measured in the same run (a 1-stage
pipeline, i.e. the plain loop, with the whole machine's intra-op threads). Inference (no loss) and
learning (forward + backward + SGD update every frame); with and without a whole-step CUDA graph
where a GPU exists. Writes ``bench/results/engine-<device>.json`` and ``.md``.

    python -m bench.engine                 # defaults for the machine at hand
    python -m bench.engine --quick         # a short smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import torch

from models.paper_nets import pixelwise
from pipeline_core import Pipeline, balance

RESULTS = Path(__file__).parent / "results"


def square_loss(out: torch.Tensor, _target: torch.Tensor | None) -> torch.Tensor:
    return out.pow(2).mean()


def frames_per_second(pipe: Pipeline, x: torch.Tensor, frames: int) -> float:
    for _ in range(2 * pipe.depth + 2):  # fill, capture graphs, warm caches
        pipe.step(x)
    start = time.perf_counter()
    for _ in range(frames):
        pipe.step(x)
    return frames / (time.perf_counter() - start)


def measure(args: argparse.Namespace, device: str) -> list[dict]:
    rows = []
    graphs = [False, True] if device == "cuda" else [False]
    for res in args.resolutions:
        for outputs in args.outputs:
            torch.manual_seed(0)
            model = pixelwise(args.layers, 32, outputs)
            x = torch.rand(1, 3, res, res, device=device)
            for mode in ("inference", "learning"):
                loss = square_loss if mode == "learning" else None
                opt = lambda p: torch.optim.SGD(p, lr=1e-6)  # noqa: E731 - tiny: keep the net stable
                for graph in graphs:
                    kw = dict(devices=[device], loss_fn=loss, optimizer=opt, cuda_graph=graph)
                    with Pipeline(model, x, stages=1, **kw) as base:
                        base_fps = frames_per_second(base, x, args.frames)
                    row = {"R": res, "F": outputs, "mode": mode, "cuda_graph": graph, "sequential_fps": base_fps}
                    for stages in args.stages:
                        split = balance(model, x, stages, [device], loss)
                        with Pipeline(model, x, balance=split, **kw) as pipe:
                            fps = frames_per_second(pipe, x, args.frames)
                        row[f"D{stages}_fps"] = fps
                        row[f"D{stages}_speedup"] = fps / base_fps
                        row[f"D{stages}_balance"] = split
                    rows.append(row)
                    print(format_row(row, args.stages), flush=True)
    return rows


def format_row(row: dict, stages: list[int]) -> str:
    cells = [
        str(row["R"]),
        str(row["F"]),
        row["mode"],
        "yes" if row["cuda_graph"] else "no",
        f"{row['sequential_fps']:.1f}",
    ]
    cells += [f"{row[f'D{d}_fps']:.1f} ({row[f'D{d}_speedup']:.2f}x)" for d in stages]
    return "| " + " | ".join(cells) + " |"


def table(rows: list[dict], stages: list[int]) -> str:
    head = ["R", "F", "mode", "CUDA graph", "sequential fps"] + [f"D={d} fps (speed-up)" for d in stages]
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
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    args = parser.parse_args(argv)
    gpu = args.device == "cuda"
    args.resolutions = args.resolutions or ([256, 1024] if gpu else [64, 128])
    args.stages = args.stages or ([2, 4] if gpu else [2])
    args.layers = args.layers or (150 if gpu else 16)
    args.frames = args.frames or (200 if gpu else 40)
    if args.quick:
        args.resolutions, args.outputs, args.layers, args.frames = args.resolutions[:1], [1], 8, 15

    device_name = torch.cuda.get_device_name() if gpu else f"{platform.processor() or 'cpu'} x{torch.get_num_threads()}"
    print(f"pixel-wise net: {args.layers} layers, 5x5 convs, 32 channels on {device_name}")
    print(table([], args.stages))
    load_before = os.getloadavg()[0]  # the machine may be shared: say how loaded it was
    rows = measure(args, args.device)
    load = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    config = {k: v for k, v in vars(args).items() if k != "quick"}
    report = {"device": device_name, "torch": torch.__version__, "config": config, "load_avg": load, "rows": rows}
    RESULTS.mkdir(parents=True, exist_ok=True)
    suffix = "-quick" if args.quick else ""
    (RESULTS / f"engine-{args.device}{suffix}.json").write_text(json.dumps(report, indent=2))
    title = (
        f"# Engine benchmark on {device_name}\n\n{args.layers}-layer pixel-wise network; "
        f"1-minute load average {load[0]} before, {load[1]} after.\n\n"
    )
    md = title + table(rows, args.stages) + "\n"
    (RESULTS / f"engine-{args.device}{suffix}.md").write_text(md)


if __name__ == "__main__":
    main()
