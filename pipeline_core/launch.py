"""Run a pipeline's stages as torchrun ranks, on one machine or several: stage h is rank h.

    # on machine A (stage 0), then the same with --node-rank 1 on machine B (stage 1):
    torchrun --nnodes 2 --nproc-per-node 1 --node-rank 0 --master-addr A --master-port 29500 \\
        -m pipeline_core.launch --config run.json

(torchrun's static rendezvous: ``--node-rank`` decides which machine holds which stage; a c10d
rendezvous assigns ranks itself.)

Every rank builds the model from the config (same seed, same weights) and keeps its own stage.
Rank 0 reads the frames (the config's ``source``) and tells every rank, step by step, what to do
(a small control message: go on, drain, stop); the last rank computes outputs and losses. Each
rank runs its stage through ``worker.StageWorker`` exactly as the process runtime does; only the
driving differs. With ``output`` set, every rank saves its stage's state as ``stage<h>.pt`` and
the last rank the outputs and losses as ``results.pt``.

The config is JSON; callables are named ``"package.module:attribute"``::

    {"model": "models.paper_nets:pixelwise", "model_kwargs": {"layers": 8},
     "input_shape": [1, 3, 64, 64], "loss": "mypkg.losses:photometric",
     "optimizer": "torch.optim:SGD", "optimizer_kwargs": {"lr": 0.001},
     "source": "pipeline_core.launch:synthetic_frames", "source_kwargs": {"frames": 100},
     "schedule": "partime", "output": "runs/demo"}
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib
import json
import os
import pickle
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from .build import build, choose_balance
from .dist_transport import DistTransport
from .epoch import Epoch
from .errors import PipelineError
from .partition import TensorMeta, check_sequential
from .worker import StageWorker, check_whole_frames, prepare_process, settle_process

#: Size of the control message rank 0 sends every rank each step (a pickled ``Control``).
CONTROL_BYTES = 512
_CONTROL_META: TensorMeta = ((CONTROL_BYTES,), torch.uint8)


@dataclass
class LaunchConfig:
    model: str
    input_shape: list[int]
    model_kwargs: dict[str, Any] = field(default_factory=dict)
    loss: str | None = None
    align_stale_grad: str | None = None  # "module:function", see pipeline_core.stage.GradAlign
    optimizer: str = "torch.optim:SGD"
    optimizer_kwargs: dict[str, Any] = field(default_factory=lambda: {"lr": 1e-3})
    source: str = "pipeline_core.launch:synthetic_frames"
    source_kwargs: dict[str, Any] = field(default_factory=dict)
    schedule: str = "partime"
    balance: list[int] | None = None  # None: rank 0 profiles the layers and tells the others
    seed: int = 0
    timeout: float = 120.0
    threads: int | None = None  # intra-op threads per rank; None: this machine's cores / its ranks
    output: str | None = None

    @classmethod
    def load(cls, path: str | Path) -> LaunchConfig:
        data = json.loads(Path(path).read_text())
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"{path}: unknown config keys {unknown}; known: {sorted(known)}")
        try:
            return cls(**data)
        except TypeError as exc:
            raise ValueError(f"{path}: {exc}") from None


def resolve(name: str) -> Any:
    """``"package.module:attribute"`` -> the attribute."""
    module, _, attr = name.partition(":")
    if not attr:
        raise ValueError(f"{name!r} must be 'package.module:attribute'")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot load {name!r}: {exc}") from exc


def synthetic_frames(
    frames: int = 100, shape: tuple[int, ...] = (1, 3, 64, 64), seed: int = 0, targets: bool = False
) -> Iterator[Tensor | tuple[Tensor, Tensor]]:
    """A slowly changing random stream (for trying a deployment without video)."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(shape, generator=gen)
    for _ in range(frames):
        x = (0.9 * x + 0.1 * torch.rand(shape, generator=gen)).contiguous()
        yield (x, torch.rand(shape, generator=gen)) if targets else x


@dataclass(frozen=True)
class Control:
    """What every rank does at one step."""

    stop: bool = False
    last_frame: int | None = None  # set while draining: no new frame came
    fed: int | None = None  # the frame fed at this step
    target: TensorMeta | None = None  # the fed frame's target (sent to the last rank)


def _encode(control: Control) -> Tensor:
    data = pickle.dumps(control)
    if len(data) + 4 > CONTROL_BYTES:
        raise ValueError(f"control message too large ({len(data)} bytes)")
    buf = torch.zeros(CONTROL_BYTES, dtype=torch.uint8)
    buf[:4] = torch.tensor(list(len(data).to_bytes(4, "little")), dtype=torch.uint8)
    buf[4 : 4 + len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    return buf


def _decode(buf: Tensor) -> Control:
    raw = bytes(buf.tolist())
    return pickle.loads(raw[4 : 4 + int.from_bytes(raw[:4], "little")])


class Launch:
    """This rank's share of a launched pipeline."""

    def __init__(self, config: LaunchConfig, rank: int, world: int) -> None:
        self.config = config
        self.rank, self.depth, self.last = rank, world, world - 1
        self.loss_fn = resolve(config.loss) if config.loss else None
        sample = torch.zeros(config.input_shape)
        torch.manual_seed(config.seed)
        model = check_sequential(resolve(config.model)(**config.model_kwargs))
        optimizer = functools.partial(resolve(config.optimizer), **config.optimizer_kwargs)
        cpu = [torch.device("cpu")]
        learn = self.loss_fn is not None
        align = resolve(config.align_stale_grad) if config.align_stale_grad else None
        built = build(model, sample, self._balance(model, sample), cpu, optimizer, config.schedule, learn, align)
        self.stage, self.schedule = built.stages[rank], built.schedule
        check_whole_frames(self.schedule)
        self.transport = DistTransport(dist.group.WORLD, rank, config.timeout)
        self.worker = StageWorker(
            self.stage,
            world,
            self.transport,
            self.loss_fn,
            *built.metas[rank : rank + 2],
            self.schedule.message_slots(),
        )
        self.epoch = Epoch(self.schedule, learn)
        self.results: dict[str, list] = {"frames": [], "outputs": [], "losses": []}

    def _balance(self, model: torch.nn.Sequential, sample: Tensor) -> list[int]:
        """The config's balance, else rank 0 profiles one and tells the others (same split everywhere)."""
        box: list[Any] = [self.config.balance]
        if self.config.balance is None:
            if self.rank == 0:
                box[0] = choose_balance(model, sample, self.depth, None, [torch.device("cpu")], self.loss_fn)
            dist.broadcast_object_list(box, src=0)
        counts = choose_balance(model, sample, None, box[0], [torch.device("cpu")], self.loss_fn)
        if len(counts) != self.depth:
            raise ValueError(f"balance {counts} has {len(counts)} stages but there are {self.depth} ranks")
        return counts

    # -- driving -------------------------------------------------------------------------------
    def run(self) -> None:
        controls = self._lead() if self.rank == 0 else self._follow()
        start, frames = time.perf_counter(), 0
        for control in controls:
            step = self.epoch.next_step(control.last_frame)
            record = self.worker.run_step(step.plan)
            frame = step.output_frame
            if self.rank == self.last and frame in record.outputs:
                self.results["frames"].append(frame)
                self.results["outputs"].append(record.outputs[frame])
                loss = record.losses.get(frame)
                self.results["losses"].append(None if loss is None else float(loss))
                frames += 1
        self.worker.new_epoch()  # receive what was sent but not needed, so every send completes
        if self.rank == self.last:
            seconds = time.perf_counter() - start
            print(json.dumps({"frames": frames, "seconds": round(seconds, 3), "fps": round(frames / seconds, 2)}))

    def _lead(self) -> Iterator[Control]:
        """Rank 0: read the source, feed stage 0, send targets and every rank's control. The run
        loop takes each step between two controls, so ``epoch.step`` is the step told."""
        for item in self._frames():
            x, target = item if isinstance(item, tuple) else (item, None)
            meta = (tuple(target.shape), target.dtype) if target is not None and self.loss_fn else None
            fed = self.epoch.feed()
            control = Control(fed=fed, target=meta)
            self._tell(self.epoch.step, control)
            self.transport.put("input", fed, x)
            if meta is not None:
                if self.last == 0:
                    self.transport.put("target", fed, target)
                else:
                    self.transport.send("target", self.last, fed, target)
            yield control
        control = Control(last_frame=self.epoch.drain_frame())
        for _ in range(self.schedule.drain_steps()):
            self._tell(self.epoch.step, control)
            yield control
        self._tell(self.epoch.step, Control(stop=True))
        self.transport.finish_sends()

    def _frames(self) -> Iterable[Any]:
        shape = tuple(self.config.input_shape)
        for item in resolve(self.config.source)(**self.config.source_kwargs):
            x = item[0] if isinstance(item, tuple) else item
            if tuple(x.shape) != shape:
                raise ValueError(f"source frame shape {tuple(x.shape)} differs from input_shape {shape}")
            yield item

    def _tell(self, step: int, control: Control) -> None:
        encoded = _encode(control)
        for rank in range(1, self.depth):
            self.transport.send("control", rank, step, encoded)

    def _follow(self) -> Iterator[Control]:
        """Other ranks: do what rank 0 says; the next control's receive is always posted early."""
        step = 0
        self.transport.post("control", step, 0, _CONTROL_META)
        while True:
            control = _decode(self.transport.recv("control", self.rank, step))
            if control.stop:
                return
            self.transport.post("control", step + 1, 0, _CONTROL_META)
            if control.target is not None and self.rank == self.last:
                self.transport.post("target", control.fed, 0, control.target, slots=self.depth)
            yield control
            step += 1

    def save(self) -> None:
        if self.config.output is None:
            return
        out = Path(self.config.output)
        out.mkdir(parents=True, exist_ok=True)
        torch.save(self.stage.state_dict(), out / f"stage{self.rank}.pt")
        if self.rank == self.last:
            torch.save(self.results, out / "results.pt")


def _threads(config: LaunchConfig) -> int:
    if config.threads is not None:
        return config.threads
    local_ranks = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    return max(1, len(os.sched_getaffinity(0)) // local_ranks)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline_core.launch", description=__doc__.split("\n")[0])
    parser.add_argument("--config", required=True, help="JSON run description (see the module docstring)")
    args = parser.parse_args(argv)
    if "RANK" not in os.environ:
        parser.error("start it with torchrun (RANK, WORLD_SIZE, MASTER_ADDR are unset)")
    config = LaunchConfig.load(args.config)
    prepare_process(_threads(config))
    dist.init_process_group("gloo", timeout=timedelta(seconds=config.timeout))
    rank = dist.get_rank()
    try:
        launch = Launch(config, rank, dist.get_world_size())
        settle_process()
        launch.run()
        launch.save()
    except (PipelineError, ValueError) as exc:
        print(f"rank {rank} (stage {rank}): {exc}", file=sys.stderr)
        return 1
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
