"""Schedules benchmark: what each update rule learns on a stream, and how fast it runs.

Two continual streams, both offline:

* **digits** — scikit-learn's handwritten digits (1797 8x8 images), shuffled and streamed one
  sample per frame for ``--passes`` passes. As in PARTIME Section V.D the network learns on a
  sliding-window *replay batch*: each new sample replaces the oldest of the last ``--window``.
  Metric: accuracy on a held-out 20 % test split, evaluated every ``--eval-every`` frames.
* **flow** — the synthetic moving-photo stream with exact ground-truth flow (``models.streams``),
  learned unsupervised (``models.flow_loss``) on a replay window of the last frame pairs. Metric:
  end-point error (EPE) of the newest pair's flow, per frame.

Every schedule gets the same inputs, network, initial weights and optimizer; schedules differ
only in their update rule. Every stage learns at the same rate, as in the service and bench.flow
(``models.online.online_pipeline``). sequential / partime / stash / hybrid /
cdp-v1 / cdp-v2 at D = 2 and 4; frames/s is measured within the same run (evaluation time excluded). Writes
``bench/results/schedules.{json,md,png}``.

    python -m bench.schedules            # both streams
    python -m bench.schedules --quick    # a short smoke run
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from models.online import online_pipeline
from pipeline_core import Pipeline, balance
from pipeline_core.schedules import Hybrid, Schedule
from testing.report import Run

DIGITS_LR = 1e-3
NAMES = ["sequential", "partime", "stash", "hybrid", "cdp-v1", "cdp-v2"]


def schedule_for(name: str, depth: int, frames: int) -> str | Schedule:
    """``hybrid`` pipelines the first half of the stream, then trains exactly."""
    return Hybrid(depth, hybrid_after=frames // 2) if name == "hybrid" else name


class Window:
    """A replay batch: the last ``size`` items; each new one replaces the oldest (a ring)."""

    def __init__(self, first: Tensor, size: int) -> None:
        self.items = first.repeat(size, *[1] * (first.dim() - 1))
        self.size, self.count = size, 0

    def push(self, item: Tensor) -> Tensor:
        self.items[self.count % self.size] = item[0]
        self.count += 1
        return self.items

    def newest(self, frame: int) -> int:
        """Position, in the window fed at ``frame``, of the item that frame added."""
        return frame % self.size


@dataclass
class Task:
    """A stream, the network that learns on it, and how to score it."""

    name: str
    metric: str  # what ``score`` returns (higher or lower is better, see ``better``)
    better: str
    frames: int
    model: Callable[[], nn.Sequential]
    optimizer: Callable
    lr: float  # of every stage (``online_pipeline``)
    loss: Callable[[Tensor, Tensor | None], Tensor]
    inputs: Callable[[], Iterator[tuple[Tensor, Tensor]]]  # (window, target window) per frame
    score: Callable[[Pipeline, int, Tensor | None], float | None]  # after the step of a frame


def digits_task(args: argparse.Namespace) -> Task:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    data = load_digits()
    x = torch.tensor(data.images / 16.0, dtype=torch.float32)[:, None]
    y = torch.tensor(data.target)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, stratify=y, random_state=0)
    order = np.concatenate([np.random.default_rng(p).permutation(len(x_train)) for p in range(args.passes)])
    order = order[: args.digits_frames]
    frames = len(order)

    def model() -> nn.Sequential:
        torch.manual_seed(0)
        return nn.Sequential(
            nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU()),
            nn.Sequential(nn.Conv2d(32, 64, 3, padding=1), nn.ReLU()),
            nn.Sequential(nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)),
            nn.Sequential(nn.Flatten(), nn.Linear(64 * 16, 128), nn.ReLU()),
            nn.Linear(128, 10),
        )

    def inputs() -> Iterator[tuple[Tensor, Tensor]]:
        xs, ys = Window(x_train[order[:1]], args.window), Window(y_train[order[:1]], args.window)
        for i in order:
            yield xs.push(x_train[i : i + 1]), ys.push(y_train[i : i + 1])

    def score(pipe: Pipeline, frame: int, _output: Tensor | None) -> float | None:
        if (frame + 1) % args.eval_every and frame + 1 != frames:
            return None
        net = pipe.module().eval()
        with torch.no_grad():
            return float((net(x_test).argmax(1) == y_test).float().mean())

    return Task(
        "digits",
        "test accuracy",
        "higher",
        frames,
        model,
        lambda p: torch.optim.Adam(p, lr=DIGITS_LR),
        DIGITS_LR,
        F.cross_entropy,
        inputs,
        score,
    )


def flow_task(args: argparse.Namespace) -> Task:
    from models.flow_loss import flow_loss
    from models.flow_metrics import epe
    from models.flow_nets import pyramid_flow_net
    from models.online import BASE_LR, flow_optimizer, frame_pair
    from models.streams import generate

    stream = generate(size=args.flow_size, frames=args.flow_frames + 1, seed=0)
    frames = args.flow_frames
    pairs = [frame_pair(stream.frames[t], stream.frames[t + 1]) for t in range(frames)]

    def inputs() -> Iterator[tuple[Tensor, Tensor]]:
        window = Window(pairs[0], args.flow_window)
        for pair in pairs:
            batch = window.push(pair)
            yield batch, batch  # unsupervised: the loss compares the flow with the frames

    def score(_pipe: Pipeline, frame: int, output: Tensor | None) -> float | None:
        newest = output[frame % args.flow_window].permute(1, 2, 0).numpy()
        return epe(newest, stream.flow[frame])

    def model() -> nn.Sequential:
        # The coarse-to-fine net without the still gate: the gate zeroes sub-pixel motion on tiny frames, and every
        # schedule would score as zero flow does.
        torch.manual_seed(0)
        return pyramid_flow_net(lk_steps=2, supervision=0.3)

    return Task(
        "flow",
        "EPE (px)",
        "lower",
        frames,
        model,
        flow_optimizer(BASE_LR),
        BASE_LR,
        lambda out, frames_: flow_loss(out, frames_),
        inputs,
        score,
    )


def run_one(task: Task, name: str, split: list[int]) -> dict:
    """Stream the task through one schedule; score every frame that comes out."""
    first, _ = next(task.inputs())
    depth = len(split)
    # the service's learner (one rate for every stage: the rule the service and bench.flow use)
    pipe = online_pipeline(
        task.model(),
        first.clone(),
        depth,
        task.lr,
        loss_fn=task.loss,
        layers=split,
        schedule=schedule_for(name, depth, task.frames),
        optimizer=task.optimizer,
    )
    curve: list[tuple[int, float]] = []
    busy = 0.0

    def collect(results) -> None:
        for r in results:
            if r.frame is not None and (value := task.score(pipe, r.frame, r.output)) is not None:
                curve.append((r.frame + 1, value))

    with pipe:
        for x, target in task.inputs():
            start = time.perf_counter()
            result = pipe.step(x, target)
            busy += time.perf_counter() - start
            collect([result])
        start = time.perf_counter()
        tail = pipe.flush()
        busy += time.perf_counter() - start
        collect(tail)
    fps = task.frames / busy
    return {"task": task.name, "schedule": name, "D": depth, "balance": split, "fps": fps, "curve": curve}


def summary(row: dict, task: Task) -> dict:
    """Final value and the mean over the last third of the stream (less noisy than one point)."""
    values = [v for f, v in row["curve"] if f > 2 * task.frames / 3]
    return {"final": row["curve"][-1][1], "last_third": float(np.mean(values)) if values else float("nan")}


def table(rows: list[dict], tasks: dict[str, Task]) -> str:
    head = "| stream | D | schedule | frames/s | vs sequential | metric | final | mean, last third |"
    lines = [head, "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        base = next(b["fps"] for b in rows if (b["task"], b["D"], b["schedule"]) == (r["task"], r["D"], "sequential"))
        t = tasks[r["task"]]
        lines.append(
            f"| {r['task']} | {r['D']} | {r['schedule']} | {r['fps']:.1f} | {r['fps'] / base:.2f}x | "
            f"{t.metric} ({t.better} is better) | {r['final']:.3f} | {r['last_third']:.3f} |"
        )
    return "\n".join(lines)


def plot(rows: list[dict], tasks: dict[str, Task], depths: list[int]):
    """Learning curves, one panel per stream and depth (a matplotlib figure)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(tasks), len(depths), figsize=(6 * len(depths), 4 * len(tasks)), squeeze=False)
    for i, task in enumerate(tasks.values()):
        for j, depth in enumerate(depths):
            ax = axes[i][j]
            for r in rows:
                if r["task"] != task.name or r["D"] != depth:
                    continue
                frames, values = np.array(r["curve"]).T
                if task.name == "flow":  # per-frame EPE is noisy: a moving average over 20 frames
                    k = min(20, len(values))
                    values = np.convolve(values, np.ones(k) / k, mode="valid")
                    frames = frames[k - 1 :]
                ax.plot(frames, values, label=f"{r['schedule']} ({r['fps']:.0f} f/s)")
            ax.set_title(f"{task.name}, D={depth}")
            ax.set_xlabel("frames seen")
            ax.set_ylabel(task.metric)
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.set_dpi(110)
    return fig


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", default="digits,flow")
    parser.add_argument("--stages", type=lambda s: [int(v) for v in s.split(",")], default=[2, 4])
    parser.add_argument("--schedules", type=lambda s: s.split(","), default=NAMES)
    parser.add_argument("--passes", type=int, default=2, help="digits: passes over the training split")
    parser.add_argument("--window", type=int, default=32, help="digits: replay window (batch) size")
    parser.add_argument("--digits-frames", type=int, default=None, help="digits: cut the stream to this length")
    parser.add_argument("--eval-every", type=int, default=100, help="digits: frames between test evaluations")
    parser.add_argument("--flow-frames", type=int, default=200)
    parser.add_argument("--flow-size", type=int, default=32)
    parser.add_argument("--flow-window", type=int, default=4)
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    args = parser.parse_args(argv)
    if args.quick:
        args.passes, args.digits_frames, args.eval_every, args.flow_frames = 1, 400, 100, 24
    builders = {"digits": digits_task, "flow": flow_task}
    tasks = {name: builders[name](args) for name in args.tasks.split(",")}

    run = Run()
    rows = []
    for task in tasks.values():
        sample = next(task.inputs())[0].clone()
        for depth in args.stages:
            # one balance per stream and depth, shared by every schedule: they differ only in the rule
            split = balance(task.model(), sample, depth, loss_fn=task.loss)
            for name in args.schedules:
                row = run_one(task, name, split)
                row.update(summary(row, task))
                rows.append(row)
                print(f"{task.name} D={depth} {name}: {row['fps']:.1f} frames/s, final {row['final']:.3f}", flush=True)
    stem = "schedules-quick" if args.quick else "schedules"
    config = {k: v for k, v in vars(args).items() if k != "quick"}
    run.png(f"{stem}.png", plot(rows, tasks, args.stages))
    run.write(stem, "Schedules benchmark", f"{table(rows, tasks)}\n\n![curves]({stem}.png)", {
        "config": config, "rows": rows})  # fmt: skip


if __name__ == "__main__":
    main()
