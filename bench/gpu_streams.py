"""Several streams' learners on one device at once: the ways they can share it, side by side.

Each learner is the service's (``online_pipeline`` of the ``fast`` net, CUDA graphs where there is CUDA) on its own
generated stream; all run flat out for ``seconds`` after every one is warm, and the steps done in all are counted.

* ``processes``: one process per learner, as the service runs them today. On a GPU the processes' kernels never
  overlap: the GPU time-slices between their contexts.
* ``mps``: the same processes under NVIDIA's Multi-Process Service (a control daemon this bench starts and stops,
  with its pipes in a temporary folder), which lets kernels of several processes run at once.
* ``threads``: one process holding every learner, each in a thread of its own on its own CUDA stream (a replayed
  graph is one launch, so the GIL is not the limit); kernels of different streams overlap within one context.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import subprocess
import tempfile
import threading
import time
from contextlib import contextmanager

import torch

WAYS = ("processes", "mps", "threads")


def learner(size: tuple[int, int], device: str, seed: int):
    """A service learner at ``size`` and its steps' inputs and targets (a short generated stream, replayed in a
    loop)."""
    from bench.gpu_step import frames, service_steps
    from models.flow_nets import build_flow_net
    from models.online import online_pipeline

    torch.manual_seed(seed)
    pairs = frames(size, 8, torch.device(device))
    learning, steps = service_steps(pairs)
    pipe = online_pipeline(build_flow_net("fast", init="pretrained"), pairs[0], 1, learning=learning,
                           devices=[device])  # fmt: skip
    for x, target in steps * 2:  # fill, warm, capture
        pipe.step(x, target=target)
    return pipe, steps


def run_steps(pipe, inputs, until: float) -> int:
    steps = 0
    while time.perf_counter() < until:
        x, target = inputs[steps % len(inputs)]
        pipe.step(x, target=target)
        steps += 1
    if pipe.stages[0].device.type == "cuda":
        torch.cuda.synchronize(pipe.stages[0].device)
    return steps


def _process_main(size, device, seed, ready, go, seconds, results) -> None:
    torch.set_num_threads(1)
    pipe, steps = learner(size, device, seed)
    ready.release()
    go.wait()
    results.put(run_steps(pipe, steps, time.perf_counter() + seconds))
    pipe.close()


def in_processes(n: int, size: tuple[int, int], device: str, seconds: float) -> int:
    ctx = mp.get_context("spawn")
    ready, go, results = ctx.Semaphore(0), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_process_main, args=(size, device, i, ready, go, seconds, results)) for i in range(n)]
    for p in procs:
        p.start()
    for _ in procs:
        if not ready.acquire(timeout=600):
            raise RuntimeError("a learner process did not get ready")
    go.set()
    total = sum(results.get(timeout=seconds + 120) for _ in procs)
    for p in procs:
        p.join(30)
    return total


def in_threads(n: int, size: tuple[int, int], device: str, seconds: float) -> int:
    cuda = device.startswith("cuda")
    streams = [torch.cuda.Stream(device) for _ in range(n)] if cuda else [None] * n
    learners = []
    for i, stream in enumerate(streams):
        with on(stream):
            learners.append(learner(size, device, i))
    counts = [0] * n
    until = time.perf_counter() + seconds

    def run(i: int) -> None:
        with on(streams[i]):
            counts[i] = run_steps(*learners[i], until)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for pipe, _ in learners:
        pipe.close()
    return sum(counts)


@contextmanager
def on(stream):
    if stream is None:
        yield
    else:
        with torch.cuda.stream(stream):
            yield


@contextmanager
def mps_daemon():
    """NVIDIA MPS for the processes started inside (they inherit its pipe folder); stopped at the end."""
    control = shutil.which("nvidia-cuda-mps-control")
    if control is None:
        raise RuntimeError("nvidia-cuda-mps-control is not on this machine")
    folder = tempfile.mkdtemp(prefix="mps-")
    env = {"CUDA_MPS_PIPE_DIRECTORY": folder, "CUDA_MPS_LOG_DIRECTORY": folder}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    subprocess.run([control, "-d"], check=True, env=os.environ.copy())
    try:
        yield
    finally:
        subprocess.run([control], input=b"quit\n", env=os.environ.copy(), check=False)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(folder, ignore_errors=True)


def measure(way: str, n: int, size: tuple[int, int], device: str, seconds: float) -> dict:
    """Steps per second of ``n`` learners sharing ``device`` the ``way`` given."""
    if way == "threads":
        steps = in_threads(n, size, device, seconds)
    elif way == "processes":
        steps = in_processes(n, size, device, seconds)
    elif way == "mps":
        with mps_daemon():
            steps = in_processes(n, size, device, seconds)
    else:
        raise ValueError(f"unknown way {way!r}")
    return {"way": way, "learners": n, "size": list(size), "seconds": seconds, "steps": steps,
            "steps_per_s": steps / seconds}  # fmt: skip


def table(rows: list[dict]) -> list[str]:
    lines = ["| way | learners | size | steps/s in all | per learner |", "|---|---:|---|---:|---:|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['way']} | {r['learners']} | {r['size'][0]}×{r['size'][1]} | {r['error']} | |")
            continue
        lines.append(
            f"| {r['way']} | {r['learners']} | {r['size'][0]}×{r['size'][1]} | {r['steps_per_s']:.1f} | "
            f"{r['steps_per_s'] / r['learners']:.1f} |"
        )
    return lines
