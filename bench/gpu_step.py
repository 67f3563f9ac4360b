"""The service's learning step on one device, per size and way: how long it takes, how many kernels it launches and
how often it waits for the device from the host.

Ways (each a fresh ``online_pipeline`` of the ``fast`` net with the shipped weights, learning as the service does from
them: each step the pair shown and a pair of known motion, ``service_steps``):

* ``eager``: ops launched one by one from Python;
* ``graph``: the whole step captured once as a CUDA graph and replayed (the service's default on a GPU);
* ``compiled``: every stage through ``torch.compile`` (inductor), eager launches of its fused kernels;
* ``compiled+graph``: both (what the service runs once its background compile is done).

A step's time is the wall time of ``--steps`` steps between two synchronizations, divided by their number (the
host queues ahead, so the device's time per step is what is measured). Kernels per step are the device kernels
the profiler records in one steady step, launches per step the host's kernel and graph launch calls, host syncs
the host's waits for the device (stream, event and device synchronizations, scalar reads), and the step's device time
by kernel name (as a graph the GPU runs one kernel after another, so a step lasts their sum: where it goes is what to
make cheaper; docs/notebook/2026-12-04-the-gpu-step-measured-again.md). On CPU only ``eager`` runs (the smoke run of
the suite).
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:  # models are imported where a way is measured, as the rest of this module does
    from models.online import Learning

#: way -> (torch.compile backend, CUDA graphs)
WAYS = {
    "eager": (None, False),
    "graph": (None, True),
    "compiled": ("inductor", False),
    "compiled+graph": ("inductor", True),
}
SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "aten::_local_scalar_dense")
LAUNCH_CALLS = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx", "cudaGraphLaunch")
#: Kernel names by device time a row keeps, and how much of each (demangled C++ templates run to hundreds) it keeps.
TOP_KERNELS, KERNEL_NAME_CHARS = 12, 80


@dataclass
class StepRow:
    way: str
    size: tuple[int, int]
    stages: int
    build_s: float  # building the pipeline
    first_steps_s: float  # the warm-up steps, where compiling and capturing happen
    step_ms: float  # steady, median of the rounds
    step_ms_rounds: list[float]
    loss: float  # after the last step: a way that computes something else shows another loss
    kernels: int | None = None  # device kernels in one steady step (None on CPU)
    launches: int | None = None  # host launch calls in one steady step
    syncs: int | None = None  # host waits for the device in one steady step
    device_ms: float | None = None  # the kernels' device time in that step
    top_kernels: list[tuple[str, int, float]] | None = None  # (kernel name, calls, ms), most device time first


def frames(size: tuple[int, int], count: int, device: torch.device) -> list[torch.Tensor]:
    """Frame pairs of a generated stream with known motion, on the device."""
    from models.online import frame_pair
    from models.streams import generate

    w, h = size
    video = generate(max(w, h), count + 1, seed=5).frames[:, :h, :w]
    return [frame_pair(video[i], video[i + 1], device) for i in range(count)]


def service_steps(pairs: list[torch.Tensor]) -> tuple[Learning, list[tuple[torch.Tensor, torch.Tensor]]]:
    """How the service learns from the shipped weights (``learning_for("pretrained")``), and each pair as its feed
    makes it a step's input and target: the pair shown and a pair of known motion made from it, a batch of two (the
    feed's own work is not the step's: it is made here, ahead)."""
    from models.online import learning_for

    learning = learning_for("pretrained")
    feed = learning.feed()
    return learning, [feed(x) for x in pairs]


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(way: str, size: tuple[int, int], stages: int, device: torch.device, steps: int, rounds: int) -> StepRow:
    from bench.learning_step import coarse_then_full
    from models.flow_nets import build_flow_net
    from models.online import online_pipeline

    backend, graph = WAYS[way]
    pairs = frames(size, steps, device)
    learning, inputs = service_steps(pairs)
    start = time.perf_counter()
    net = build_flow_net("fast", init="pretrained")
    layers = coarse_then_full(net) if stages == 2 else None
    pipe = online_pipeline(net, pairs[0], stages, learning=learning, layers=layers,
                           devices=[device], compile_backend=backend, cuda_graph=graph)  # fmt: skip
    build_s = time.perf_counter() - start
    start = time.perf_counter()
    for x, target in inputs[: 2 * stages + 4]:  # fill, compile, warm and capture every steady step
        pipe.step(x, target=target)
    sync(device)
    first_s = time.perf_counter() - start
    times = []
    for _ in range(rounds):
        sync(device)
        start = time.perf_counter()
        for x, target in inputs:
            r = pipe.step(x, target=target)
        sync(device)
        times.append((time.perf_counter() - start) * 1e3 / len(inputs))
    counted: dict = {}
    if device.type == "cuda":
        counted = count_one_step(pipe, inputs[0], device)
    loss = r.loss
    pipe.close()
    return StepRow(way, size, stages, build_s, first_s, statistics.median(times), times,
                   loss=float(loss if loss is not None else float("nan")), **counted)  # fmt: skip


def count_one_step(pipe, step: tuple[torch.Tensor, torch.Tensor], device: torch.device) -> dict:
    """Of one ``pipe.step`` on a step's input and target (the profiler's records): its device kernels, host launch
    calls and host syncs, and the kernels' device time, in all and by name (``StepRow``'s fields)."""
    from torch.profiler import ProfilerActivity, profile

    x, target = step
    sync(device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        pipe.step(x, target=target)
        sync(device)  # after the step: counted below and taken off
    events = prof.events()
    kernels = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA and _is_kernel(e.name)]
    device_ms, top = kernel_time((e.name, e.time_range.elapsed_us()) for e in kernels)
    return {"kernels": len(kernels), "launches": sum(1 for e in events if e.name in LAUNCH_CALLS),
            "syncs": sum(1 for e in events if e.name in SYNC_CALLS) - 1, "device_ms": device_ms,
            "top_kernels": top}  # fmt: skip


def kernel_time(kernels: Iterable[tuple[str, float]]) -> tuple[float, list[tuple[str, int, float]]]:
    """(name, microseconds) of each kernel a step ran -> its kernels' device time in ms, and the ``TOP_KERNELS``
    names by device time: (name, calls, ms), the name cut to ``KERNEL_NAME_CHARS``."""
    calls: dict[str, int] = defaultdict(int)
    spent: dict[str, float] = defaultdict(float)
    for name, us in kernels:
        short = name.removeprefix("void ").replace("at::native::", "").replace("(anonymous namespace)::", "")
        key = short[:KERNEL_NAME_CHARS]
        calls[key] += 1
        spent[key] += us / 1e3
    top = sorted(spent, key=spent.__getitem__, reverse=True)[:TOP_KERNELS]
    return sum(spent.values()), [(name, calls[name], spent[name]) for name in top]


def _is_kernel(name: str) -> bool:
    return not name.startswith(("Memcpy", "Memset", "cuda"))


def table(rows: list[StepRow]) -> list[str]:
    lines = [
        "| size | stages | way | step ms (median of rounds) | kernels / step | device ms / step | launches / step | "
        "host syncs / step | build s | first steps s | loss |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        count = lambda v: "–" if v is None else str(v)  # noqa: E731
        device = "–" if r.device_ms is None else f"{r.device_ms:.2f}"
        lines.append(
            f"| {r.size[0]}×{r.size[1]} | {r.stages} | {r.way} | {r.step_ms:.2f} | {count(r.kernels)} | {device} | "
            f"{count(r.launches)} | {count(r.syncs)} | {r.build_s:.1f} | {r.first_steps_s:.1f} | {r.loss:.5f} |"
        )
    return lines


def kernel_table(r: dict) -> list[str]:
    """Where a row's step (``as_dict``) spends its device time, most first (nothing where no kernels were counted)."""
    if not r["top_kernels"]:
        return []
    lines = [f"Where the device time of one step goes ({r['size'][0]}×{r['size'][1]}, D = {r['stages']}, {r['way']}; "
             f"{r['device_ms']:.2f} ms over {r['kernels']} kernels):", "",
             "| kernel | calls | ms | share |", "|---|---:|---:|---:|"]  # fmt: skip
    lines += [f"| `{name}` | {calls} | {ms:.3f} | {ms / r['device_ms']:.0%} |" for name, calls, ms in r["top_kernels"]]
    return lines


def as_dict(row: StepRow) -> dict:
    return asdict(row)
