"""Online unsupervised flow on a ground-truth stream: sequential vs PARTIME vs OpenCV.

``python -m bench.flow --stream FILE.npz --stages 1,2,4 [--out STEM]`` (sides from ``models.streams.MIN_SIDE`` up: the
frames padded to the net's sides, the stream's own pixels scored)

Every learner starts from the same random weights and sees each frame pair once, in order
(predict-then-update: the flow scored for pair t was produced before learning from it). With
PARTIME the output of step t belongs to pair t-(D-1) (``StepResult.frame``) and is scored against
that pair's ground truth. Writes STEM.json (per method: epe_all, epe_last100, photo_last100,
ms_per_frame, ...), a loss/EPE-over-time STEM.png and a markdown table STEM.md (default
bench/results/flow-<stream>).
"""

from __future__ import annotations

import argparse
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np
import torch

from models.classical import classical_methods
from models.flow_loss import flow_loss
from models.flow_metrics import epe, moving_mask, photometric_error, reconstruction_accuracy
from models.flow_nets import FLOW_NETS, INITS, build_flow_net, size_multiple
from models.online import BASE_LR, frame_pair, online_pipeline, predict_then_learn, stream_pairs
from models.stale_gradient import motion_aligned
from models.streams import MIN_SIDE, Stream, for_net, load_npz
from testing.report import RESULTS, Run

LAST = 100  # the "after learning" window
#: How a PARTIME stage treats the gradient of an older frame: moved with the flow (what the service does), or as it
#: was sent (PARTIME as published), to measure what moving it is worth.
STALE_GRADIENT = {"moved": motion_aligned, "as-sent": None}


class Scores:
    """Per-pair scores of one method, filled in whatever order outputs arrive."""

    def __init__(self, pairs: int) -> None:
        self.epe = np.full(pairs, np.nan)
        self.photo = np.full(pairs, np.nan)
        self.loss = np.full(pairs, np.nan)
        self.recon = np.full(pairs, np.nan)
        self.seconds: list[float] = []

    def add(self, stream: Stream, t: int, flow: np.ndarray, loss: float | None = None) -> None:
        """Scored on the stream's own pixels: frames padded to the net's sides reach past its flow."""
        gt = stream.flow[t]
        h, w = gt.shape[:2]
        a, b, flow = stream.frames[t][:h, :w], stream.frames[t + 1][:h, :w], flow[:h, :w]
        self.epe[t] = epe(flow, gt)
        self.photo[t] = photometric_error(a, b, flow)
        self.recon[t] = reconstruction_accuracy(a, b, flow, moving_mask(a, b, gt))[0.05]
        if loss is not None:
            self.loss[t] = loss

    def summary(self) -> dict[str, float]:
        last = slice(-min(LAST, len(self.epe)), None)
        return {
            "epe_all": float(np.nanmean(self.epe)),
            "epe_last100": float(np.nanmean(self.epe[last])),
            "photo_last100": float(np.nanmean(self.photo[last])),
            "recon_acc_0.05_last100": float(np.nanmean(self.recon[last])),
            "ms_per_frame": 1000 * float(np.median(self.seconds)) if self.seconds else 0.0,
            "scored_pairs": int(np.isfinite(self.epe).sum()),
        }


def parse_stages(text: str) -> list[int]:
    """``"1,2,4"`` -> [1, 2, 4], sorted, without repeats; ValueError unless positive integers."""
    stages = sorted({int(s) for s in text.split(",")})
    if not stages or stages[0] < 1:
        raise ValueError(f"pipeline depths must be positive integers, got {text!r}")
    return stages


def learner_name(stages: int) -> str:
    return "sequential" if stages == 1 else f"partime_d{stages}"


def learn_online(
    stream: Stream,
    stages: int,
    net: str,
    init: str,
    base_lr: float,
    seed: int,
    stale_gradient: str = "moved",
    occlusion: bool = False,
) -> tuple[Scores, dict]:
    """One pass over the stream with a fresh net split into ``stages`` (1 = plain sequential); with ``occlusion``
    the loss leaves out the pixels the flow says are covered in the next frame (``flow_loss``'s ``occlusion``)."""
    torch.manual_seed(seed)
    pairs = len(stream.flow)
    x0 = frame_pair(stream.frames[0], stream.frames[1])
    scores = Scores(pairs)
    schedule = "partime" if stages > 1 else "sequential"
    pipe = online_pipeline(
        build_flow_net(net, init=init),
        x0,
        stages,
        base_lr,
        loss_fn=partial(flow_loss, occlusion=occlusion),
        devices=["cpu"],
        schedule=schedule,
        align_stale_grad=STALE_GRADIENT[stale_gradient],
    )
    inputs = stream_pairs(stream.frames)  # as the service pairs frames
    with pipe:
        for r in predict_then_learn(pipe, inputs):
            scores.seconds.append(r.step_seconds)
            if r.frame is not None:
                scores.add(stream, r.frame, r.output[0].permute(1, 2, 0).numpy(), r.loss)
    info = {"stages": stages, "lr": base_lr, "balance": pipe.balance, "net": net, "init": init, "occlusion": occlusion}
    return scores, {**info, "stale_gradient": stale_gradient} if stages > 1 else info


def run_classical(stream: Stream) -> dict[str, Scores]:
    out = {}
    for name, method in classical_methods().items():
        scores = Scores(len(stream.flow))
        for t in range(len(stream.flow)):
            start = time.perf_counter()
            flow = method(stream.frames[t], stream.frames[t + 1])
            scores.seconds.append(time.perf_counter() - start)
            scores.add(stream, t, flow)
        out[name] = scores
    zero = Scores(len(stream.flow))
    for t in range(len(stream.flow)):
        zero.add(stream, t, np.zeros_like(stream.flow[t]))
    out["zero_flow"] = zero
    return out


def _smooth(values: np.ndarray, window: int = 9) -> np.ndarray:
    kernel = np.ones(window) / window
    filled = np.where(np.isfinite(values), values, np.nanmean(values))
    return np.convolve(filled, kernel, mode="same") / np.convolve(np.ones_like(filled), kernel, mode="same")


def plot(all_scores: dict[str, Scores], title: str):
    """Smoothed training loss and EPE over the stream (a matplotlib figure)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_loss, ax_epe) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for name, scores in all_scores.items():
        if np.isfinite(scores.loss).any():
            ax_loss.plot(_smooth(scores.loss), label=name)
        ax_epe.plot(_smooth(scores.epe), label=name, linestyle="-" if np.isfinite(scores.loss).any() else "--")
    ax_loss.set_ylabel("training loss (smoothed)")
    ax_loss.set_title(title)
    ax_loss.legend(fontsize=8)
    ax_epe.set_ylabel("EPE [px] (smoothed)")
    ax_epe.set_xlabel("frame")
    ax_epe.set_yscale("log")
    ax_epe.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.set_dpi(110)
    return fig


def markdown(results: dict[str, dict]) -> str:
    lines = [
        "| method | EPE all | EPE last 100 | photo last 100 | recon acc@0.05 last 100 | ms/frame |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        lines.append(
            f"| {name} | {r['epe_all']:.3f} | {r['epe_last100']:.3f} | {r['photo_last100']:.4f} "
            f"| {r['recon_acc_0.05_last100']:.3f} | {r['ms_per_frame']:.1f} |"
        )
    seq = results.get("sequential")
    if seq:
        lines.append("")
        for name, r in results.items():
            if name.startswith("partime"):
                lines.append(
                    f"- {name} / sequential EPE last 100: {r['epe_last100'] / seq['epe_last100']:.3f}"
                    f" (balance {r['balance']}, lr {r['lr']:.2g} for every stage, stale gradient"
                    f" {r['stale_gradient']})"
                )
        for classical in ("farneback", "dis_fast"):
            if classical in results:
                ratio = seq["epe_last100"] / results[classical]["epe_last100"]
                lines.append(f"- sequential / {classical} EPE last 100: {ratio:.3f}")
        if seq.get("occlusion"):
            lines.append("- the learners' loss leaves out the pixels their flow says are covered (--occlusion-mask)")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stream", required=True, help=".npz from models.streams (frames + flow)")
    parser.add_argument("--stages", default="1,2,4", help="comma-separated pipeline depths; 1 = sequential")
    parser.add_argument("--out", help="results stem (default bench/results/flow-<stream>: .json, .md, .png)")
    parser.add_argument("--net", default="strong", choices=sorted(FLOW_NETS))
    parser.add_argument(
        "--init",
        default="scratch",
        choices=INITS,
        help="scratch: PARTIME's research setting (learning from nothing online)",
    )
    parser.add_argument("--lr", type=float, default=BASE_LR, help="Adam lr of every stage")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--stale-gradient",
        default="moved",
        choices=sorted(STALE_GRADIENT),
        help="PARTIME stages: move an older frame's gradient with the flow (the service's way) or use it as sent",
    )
    parser.add_argument(
        "--occlusion-mask",
        action="store_true",
        help="leave the pixels the flow says are covered in the next frame out of the loss (not the service's loss)",
    )
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch default)")
    args = parser.parse_args(argv)
    try:
        stages = parse_stages(args.stages)
    except ValueError:
        parser.error(f"--stages must be positive integers like 1,2,4, got {args.stages!r}")
    try:
        stream = load_npz(args.stream)
    except (OSError, ValueError) as exc:
        parser.error(f"cannot read stream: {exc}")
    if len(stream.flow) < 2 or min(stream.frames.shape[1:3]) < MIN_SIDE:
        parser.error(f"stream needs >= 3 frames and sides of {MIN_SIDE} px or more, got {stream.frames.shape}")
    stream = for_net(stream, size_multiple(FLOW_NETS[args.net]()))
    if args.threads:
        torch.set_num_threads(args.threads)
    out = Path(args.out) if args.out else RESULTS / f"flow-{Path(args.stream).stem}"
    run = Run(directory=out.parent)

    all_scores: dict[str, Scores] = {}
    info: dict[str, dict] = {}
    for d in stages:
        name = learner_name(d)
        print(f"{name}: learning online over {len(stream.flow)} pairs ...", file=sys.stderr, flush=True)
        all_scores[name], info[name] = learn_online(
            stream, d, args.net, args.init, args.lr, args.seed, args.stale_gradient, args.occlusion_mask
        )
    print("classical references ...", file=sys.stderr, flush=True)
    all_scores.update(run_classical(stream))

    results = {name: {**scores.summary(), **info.get(name, {})} for name, scores in all_scores.items()}
    size = "x".join(map(str, stream.frames.shape[1:3]))
    threads = torch.get_num_threads()
    net = f"net {args.net} ({args.init})"
    title = f"{Path(args.stream).name}: {len(stream.frames)} frames {size}, {net}, torch threads {threads}"
    run.png(f"{out.name}.png", plot(all_scores, title))
    run.write(out.name, title, f"{markdown(results)}\n![curves]({out.name}.png)", {"methods": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
