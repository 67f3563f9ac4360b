"""Pretrain a flow net offline on camera-like clips with exact flow (``make pretrain``).

Why: a net learning from scratch on a real stream paints noise for minutes (random features match
random things), and unsupervised learning alone is slow to find small movers on a static background.
Starting every stream from weights that already estimate flow on camera-like footage, then adapting
online, is test-time training as the video literature does it. The weights are small (~150-270 kB)
and ship in the package (``models/weights/``); this script is how they were made.

Data: ``--clips`` clips of ``models.scenes`` (static, panning and hand-held cameras, 0-5 movers, slow
and fast, motion blur, noise, flicker, H.264), generated once from ``--seed``; the last ``--holdout``
clips are never trained on and give the held-out EPE, over all pixels and over the fast ones (true
speed above ``models.flow_metrics.FAST_MOTION``), both recorded in ``<net>.json`` beside zero flow's.
Warm restart (``--init FILE``): a run may start from weights an earlier run wrote and learn on clips of another
seed with a fresh cosine cycle (SGDR, Loshchilov & Hutter): more and newer clips without throwing away the first
cycle's hours. ``<net>.json`` then nests the earlier run's own record under ``warm_start``. The shipped weights are
one cycle's, restarted briefly and gently (500 steps at lr 1e-4) each time the net's layers changed (the last two
swapped places; a full-resolution Lucas-Kanade step came in); a full second cycle scored better on generated clips
and worse on real ones (docs/models.md#pretraining).
Objective: supervised end-point error of the final flow plus, with smaller weights, of every coarser
level's estimate (PWC-Net's multi-scale loss), Adam with a cosine decay. The intermediate levels' own
unsupervised losses (``supervision``) are off while pretraining: the exact flow is a better teacher.
The still gate's margin and quiet threshold are not trained here: they are priors about cameras (how much better
than standing still a motion must explain a pixel, at about 8-bit video's quantisation noise, and how little a still
place changes), and generated clips,
where something moves nearly everywhere, would teach it to gate less than a real camera's mostly static
picture needs.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import shlex
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from . import scenes
from .flow_cleanup import EdgeAwareFill
from .flow_loss import flow_lengths
from .flow_metrics import FAST_MOTION
from .flow_nets import WEIGHTS_DIR, PairFeatures, StartFlow, TakeFlow, build_flow_net
from .still_gate import StillGate


def level_weights(levels: int) -> tuple[float, ...]:
    """Weight of each pyramid level's EPE, coarse to fine: halved per level up from 1 at full resolution (coarser
    estimates only need to be roughly right)."""
    return tuple(0.5 ** (levels - 1 - i) for i in range(levels))


CACHE_DIR = Path(__file__).resolve().parent.parent / ".cache" / "pretrain"


def cached_dataset(clips: int, width: int, height: int, frames: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``make_dataset``, kept in ``.cache/pretrain/`` under a name that changes with its arguments and with the
    generator's source, so a rerun reuses it and a changed generator never does."""
    source = hashlib.sha256(Path(scenes.__file__).read_bytes()).hexdigest()[:12]
    path = CACHE_DIR / f"scenes-{clips}x{frames}-{width}x{height}-seed{seed}-{source}.npz"
    if path.is_file():
        with np.load(path) as data:
            return data["pairs"], data["flows"]
    pairs, flows = make_dataset(clips, width, height, frames, seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, pairs=pairs, flows=flows)
    return pairs, flows


def make_dataset(
    clips: int, width: int, height: int, frames: int, seed: int, scene: str = "camera", recorded: int = 1
) -> tuple[np.ndarray, np.ndarray]:
    """Frame pairs uint8 [N, 2, H, W, 3] and their flow float16 [N, H, W, 2] from ``clips`` clips of ``scene``
    (``models.scenes.SCENES``), recorded at ``recorded`` times the size (``models.scenes.camera_clip``)."""
    rng, textures = np.random.default_rng(seed), scenes.Textures()
    pairs, flows = [], []
    for i in range(clips):
        clip = scenes.camera_clip(rng, width, height, frames, textures, scene, recorded)
        pairs += [clip.frames[t : t + 2] for t in range(frames - 1)]
        flows += list(clip.flow.astype(np.float16))
        if (i + 1) % 200 == 0:
            print(f"  {i + 1}/{clips} clips", flush=True)
    return np.stack(pairs), np.stack(flows)


def as_input(pairs: np.ndarray) -> Tensor:
    """uint8 [B, 2, H, W, 3] -> (B, 6, H, W) in [0, 1], previous then current (``models.online.frame_pair``)."""
    t = torch.from_numpy(pairs).permute(0, 1, 4, 2, 3).flatten(1, 2)
    return t.float().div_(255.0)


def level_flows(net: nn.Sequential, x: Tensor) -> list[list[Tensor]]:
    """The flow after each refinement layer (each at full resolution), grouped by pyramid level, coarse to
    fine; the last is the output."""
    levels: list[list[Tensor]] = []
    for layer in net:
        x = layer(x)
        if isinstance(layer, PairFeatures):  # a new level starts
            levels.append([])
        elif not isinstance(layer, StartFlow | TakeFlow):  # every other layer refines the flow
            levels[-1].append(x[:, :2])
    return levels


@contextlib.contextmanager
def no_deep_supervision(net: nn.Sequential) -> Iterator[None]:
    """Switch off the layers' own unsupervised losses (restored afterwards)."""
    layers = [m for m in net if hasattr(m, "supervision")]
    saved = [m.supervision for m in layers]
    for m in layers:
        m.supervision = 0.0
    try:
        yield
    finally:
        for m, s in zip(layers, saved, strict=True):
            m.supervision = s


def epe(flow: Tensor, gt: Tensor) -> Tensor:
    return flow_lengths(flow - gt).mean()


def multiscale_loss(levels: list[list[Tensor]], gt: Tensor) -> Tensor:
    """EPE of every refinement's estimate, averaged per level; the finest level weighted most (``level_weights``)."""
    total = gt.new_zeros(())
    for weight, flows in zip(level_weights(len(levels)), levels, strict=True):
        total = total + weight * sum(epe(f, gt) for f in flows) / len(flows)
    return total


def batches(pairs: np.ndarray, flows: np.ndarray, batch: int, rng: np.random.Generator) -> Iterator[tuple]:
    """Random batches forever; half are mirrored left-right (the flow's u changes sign)."""
    while True:
        idx = rng.choice(len(pairs), batch, replace=False)
        x, gt = as_input(pairs[idx]), torch.from_numpy(flows[idx].astype(np.float32)).permute(0, 3, 1, 2)
        if rng.random() < 0.5:
            x, gt = x.flip(-1), gt.flip(-1) * torch.tensor([-1.0, 1.0]).view(1, 2, 1, 1)
        yield x, gt


@torch.no_grad()
def held_out_scores(net: nn.Sequential, pairs: np.ndarray, flows: np.ndarray) -> dict[str, float]:
    """EPE of the net and of zero flow over held-out pairs: over all pixels (each pair's mean, averaged) and over the
    fast ones (true speed above ``FAST_MOTION`` px/frame, pooled)."""
    sums = dict.fromkeys(("epe", "zero_flow_epe", "fast_epe", "zero_flow_fast_epe", "fast_pixels"), 0.0)
    for i in range(0, len(pairs), 16):
        x, gt = as_input(pairs[i : i + 16]), torch.from_numpy(flows[i : i + 16].astype(np.float32)).permute(0, 3, 1, 2)
        error, speed = flow_lengths(net(x) - gt)[:, 0], flow_lengths(gt)[:, 0]
        fast = (speed > FAST_MOTION).float()
        sums["epe"] += float(error.mean()) * len(x)
        sums["zero_flow_epe"] += float(speed.mean()) * len(x)
        sums["fast_epe"] += float((error * fast).sum())
        sums["zero_flow_fast_epe"] += float((speed * fast).sum())
        sums["fast_pixels"] += float(fast.sum())
    fast_pixels = max(sums.pop("fast_pixels"), 1.0)
    return {name: total / (fast_pixels if "fast" in name else len(pairs)) for name, total in sums.items()}


def pretrain(args: argparse.Namespace) -> dict:
    torch.manual_seed(args.seed)
    start = time.time()
    print(f"generating {args.clips} clips of {args.frames} frames at {args.width}x{args.height} ...", flush=True)
    pairs, flows = cached_dataset(args.clips, args.width, args.height, args.frames, args.seed)
    holdout = args.holdout * (args.frames - 1)
    train_pairs, train_flows = pairs[:-holdout], flows[:-holdout]
    test_pairs, test_flows = pairs[-holdout:], flows[-holdout:]
    data_s = time.time() - start
    net = build_flow_net(args.net, init="scratch")
    if args.init:
        net.load_state_dict(torch.load(args.init, map_location="cpu", weights_only=True))
    for m in net:
        if isinstance(m, EdgeAwareFill):
            m.learn_scales = True  # offline only (EdgeAwareFill)
    trained = [p for m in net if not isinstance(m, StillGate) for p in m.parameters()]  # the gate's thresholds: priors
    opt = torch.optim.Adam(trained, lr=args.lr)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: 0.02 + 0.98 * 0.5 * (1 + math.cos(math.pi * s / args.steps))
    )
    before = held_out_scores(net, test_pairs, test_flows)
    print(f"before training: held-out EPE {before['epe']:.3f} (zero flow {before['zero_flow_epe']:.3f})", flush=True)
    log = []
    with no_deep_supervision(net):
        data = batches(train_pairs, train_flows, args.batch, np.random.default_rng(args.seed))
        for step in range(args.steps):
            x, gt = next(data)
            loss = multiscale_loss(level_flows(net, x), gt)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            schedule.step()
            if (step + 1) % args.log_every == 0 or step + 1 == args.steps:
                test = held_out_scores(net, test_pairs, test_flows)
                log.append(
                    {
                        "step": step + 1,
                        "train_loss": float(loss.detach()),
                        "held_out_epe": test["epe"],
                        "held_out_fast_epe": test["fast_epe"],
                        "seconds": time.time() - start,
                    }
                )
                print(
                    f"step {step + 1}: loss {log[-1]['train_loss']:.3f}, held-out EPE {test['epe']:.3f}, "
                    f"fast pixels {test['fast_epe']:.3f}",
                    flush=True,
                )
    after = held_out_scores(net, test_pairs, test_flows)
    return {
        "net": net,
        "held_out": after,
        "start_epe": before["epe"],
        "data_seconds": data_s,
        "train_seconds": time.time() - start - data_s,
        "log": log,
        "pairs": len(train_pairs),
        "held_out_pairs": holdout,
    }


def save(result: dict, args: argparse.Namespace, command: str) -> Path:
    """``<out>/<net>.pt`` (the state_dict) and ``<net>.json`` beside it: how it was made and how good it is."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.save(result["net"].state_dict(), out / f"{args.net}.pt")
    meta = {
        "command": command,
        "net": args.net,
        "data": {"clips": args.clips, "frames_per_clip": args.frames, "size": [args.width, args.height],
                 "seed": args.seed, "train_pairs": result["pairs"], "held_out_pairs": result["held_out_pairs"]},
        "training": {"steps": args.steps, "batch": args.batch, "lr": args.lr,
                     "data_seconds": round(result["data_seconds"]), "train_seconds": round(result["train_seconds"]),
                     "torch_threads": torch.get_num_threads()},
        "held_out_epe": round(result["held_out"]["epe"], 4),
        "held_out_zero_flow_epe": round(result["held_out"]["zero_flow_epe"], 4),
        "held_out_fast_epe": round(result["held_out"]["fast_epe"], 4),
        "held_out_zero_flow_fast_epe": round(result["held_out"]["zero_flow_fast_epe"], 4),
        "fast_motion_px": FAST_MOTION,
        "start_epe": round(result["start_epe"], 4),
        "log": result["log"],
    }  # fmt: skip
    if args.init:
        record = Path(args.init).with_suffix(".json")
        meta["warm_start"] = json.loads(record.read_text()) if record.is_file() else {"weights": str(args.init)}
    (out / f"{args.net}.json").write_text(json.dumps(meta, indent=2) + "\n")
    return out / f"{args.net}.pt"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--net", default="fast")
    parser.add_argument("--clips", type=int, default=2000)
    parser.add_argument("--holdout", type=int, default=60, help="clips kept out of training, for the held-out EPE")
    parser.add_argument("--frames", type=int, default=6, help="frames per clip")
    parser.add_argument("--width", type=int, default=160)
    parser.add_argument("--height", type=int, default=120)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log-every", type=int, default=250)
    parser.add_argument("--init", help="start from these weights (a .pt this script wrote) instead of random ones")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--out", default=str(WEIGHTS_DIR))
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    command = shlex.join(["python", "-m", "models.pretrain", *(argv if argv is not None else sys.argv[1:])])
    result = pretrain(args)
    path = save(result, args, command)
    held_out = result["held_out"]
    print(
        f"wrote {path}: held-out EPE {held_out['epe']:.3f} (zero flow {held_out['zero_flow_epe']:.3f}), "
        f"fast pixels {held_out['fast_epe']:.3f} (zero flow {held_out['zero_flow_fast_epe']:.3f})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
