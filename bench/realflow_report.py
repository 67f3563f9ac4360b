"""What a ``bench.realflow`` run writes besides its json: the tables (per window, and each learner against the better
classical method) and the picture sheet (learned flows beside the pseudo-GT and the classical methods, scored pairs
chosen across the clip and at its fastest motion)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from bench.realflow_scores import MATCHED_SHARE, WINDOWS, Clip, PairScores
from models.flow_metrics import FAST_MOTION, motion_mask, photometric_residual
from models.flow_viz import color_wheel_legend, flow_to_color

CLASSICAL = ("farneback", "dis_fast")  # at the working size; DIS medium is the pseudo-GT's own method
AS_SHIPPED = "pretrained, as shipped"  # the frozen net without the service's feed (``bench.realflow.run_as_shipped``)
#: The scores each learner is set against the better classical method on, with their column titles.
RATIOS = {
    "epe_all": "EPE all",
    "epe_moving": "EPE moving",
    "epe_fast": "EPE fast",
    "epe_moving_consistent": "moving, consistent",
    "epe_fast_consistent": "fast, consistent",
}


def sheet_pairs(pairs: int) -> list[int]:
    """Pairs drawn on the picture sheet: the first (untrained), two early ones, then across the clip."""
    chosen: list[int] = []
    for t in (0, 10, 30, 100, pairs // 2, pairs - 1):
        if t < pairs and all(abs(t - c) >= 5 for c in chosen):
            chosen.append(t)
    return chosen


def fastest_pair(pseudo_gt: np.ndarray, unmatched: np.ndarray) -> int:
    """The pair whose pseudo-GT has the fastest motion (99th-percentile speed, so a few wild vectors do not pick it):
    where large motion is damped or smeared, if anywhere; of the pairs with a correspondence (``unmatched`` False:
    at a scene cut the reference's wild vectors are the fastest)."""
    speeds = np.linalg.norm(pseudo_gt.reshape(len(pseudo_gt), -1, 2), axis=-1)
    fastest = np.percentile(speeds, 99, axis=1)
    fastest[unmatched] = -1.0
    return int(np.argmax(fastest))


def picture_sheet(clip: Clip, all_scores: dict[str, PairScores], title: str, fastest: int | None = None):
    """Rows = pairs; columns = frame | each learner | pseudo-GT | where it is consistent | Farneback | DIS-fast, one
    colour scale per row (the pseudo-GT's 99th-percentile speed, at least 1 px: faster vectors are drawn fully
    saturated; the consistent pixels white, the others grey); the row of pair ``fastest`` says so."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    learners = [name for name in all_scores if name not in (*CLASSICAL, "zero_flow")]
    columns = ["frame", *learners, "pseudo-GT", "consistent", *CLASSICAL]
    rows = sorted(next(iter(all_scores.values())).flows)
    height, width = clip.frames.shape[1:3]
    cell = 2.0
    fig, axes = plt.subplots(
        len(rows), len(columns), figsize=(cell * len(columns), cell * height / width * len(rows) + 1.0), squeeze=False
    )
    for i, t in enumerate(rows):
        gt = clip.pseudo_gt[t]
        scale = max(1.0, float(np.percentile(np.linalg.norm(gt, axis=-1), 99)))
        flows = {name: all_scores[name].flows[t] for name in (*learners, *CLASSICAL)} | {"pseudo-GT": gt}
        for j, column in enumerate(columns):
            ax = axes[i, j]
            if column == "frame":
                image = clip.frames[t]
            elif column == "consistent":
                image = np.where(clip.consistent[t][..., None], 255, 128).astype(np.uint8).repeat(3, axis=-1)
            else:
                image = flow_to_color(flows[column], max_magnitude=scale)
            ax.imshow(image, interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            if i == 0:
                ax.set_title(column, fontsize=8)
            if j == 0:
                fast = " (fastest)" if t == fastest else ""
                ax.set_ylabel(f"pair {t}{fast}\n{scale:.1f} px", fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout(rect=(0, 0.0, 1, 0.95))
    legend = fig.add_axes((0.005, 0.9, 0.06, 0.08))
    legend.imshow(color_wheel_legend(64))
    legend.axis("off")
    fig.set_dpi(110)
    return fig


def markdown(result: dict) -> str:
    clip, gt = result["clip"], result["pseudo_gt"]
    lines = [
        f"{result['torch_threads']} torch threads; {result['seconds']:.0f} s in all.",
        "",
        f"Decoded {clip['decoded']} frames, kept {clip['kept']} at {clip['fps']:g} fps ({clip['pairs']} pairs), "
        f"{clip['full_size'][0]}x{clip['full_size'][1]} → {clip['size'][0]}x{clip['size'][1]}. Pseudo-GT: "
        f"{gt['method']}, mean speed {gt['mean_magnitude']:.2f} px, {100 * gt['moving_fraction']:.0f} % of pixels "
        f"moving (> 0.5 px), {100 * gt['fast_fraction']:.1f} % fast (> {FAST_MOTION:g} px), computed in "
        f"{gt['seconds']:.0f} s; the fastest pair is {result['fastest_pair']}. It passes its own forward-backward "
        f'test on {100 * gt["consistent_moving_fraction"]:.0f} % of the moving pixels: the columns "consistent" '
        "score only those (elsewhere the reference is occluded or wrong, and an error against it is partly its own).",
    ]
    if result["unmatched_pairs"]:
        lines[-1] += (
            f" Pairs {', '.join(map(str, result['unmatched_pairs']))} have no correspondence (the reference passes its "
            f"test on under {100 * MATCHED_SHARE:.0f} % of their pixels: scene cuts): no method is scored there, and "
            "the windows count the other pairs."
        )
    if clip["backwards_timestamps"]:
        lines[-1] += (
            f" {clip['backwards_timestamps']} decoded frames carry a timestamp earlier than the frame before them "
            "(container timestamps in decode order); the service's resampler drops those, and so does this bench."
        )
    lines += ["", "ms/pair: median step time on this shared machine at the load above, not a speed measurement."]
    for window, pairs in WINDOWS.items():
        first = next(iter(result["methods"].values()))[window]
        label = "whole clip" if pairs is None else f"first {pairs} pairs"
        lines += [
            "",
            f"### {label} ({first['pairs']} pairs; {first['moving_pixels']:,} moving pixels, "
            f"{first['fast_pixels']:,} fast; consistent: {first['consistent_moving_pixels']:,} moving, "
            f"{first['consistent_fast_pixels']:,} fast)",
            "",
            "| method | EPE all | EPE moving | EPE fast | moving, consistent | fast, consistent | F1 moving "
            "| photometric | ms/pair |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for name, m in result["methods"].items():
            w = m[window]
            lines.append(
                f"| {name} | {w['epe_all']:.3f} | {w['epe_moving']:.3f} | {w['epe_fast']:.3f} "
                f"| {w['epe_moving_consistent']:.3f} | {w['epe_fast_consistent']:.3f} | {w['f1_moving']:.3f} "
                f"| {w['photo']:.4f} | {m['ms_per_pair']:.1f} |"
            )
        lines += ratio_table(versus_classical(result["methods"], window), "better of Farneback and DIS-fast")
        lines += ratio_table(versus_as_shipped(result["methods"], window), "the net as shipped")
    if result.get("losing_pairs"):
        lines += losing_pairs_table(result["losing_pairs"])
    learned = [(name, m) for name, m in result["methods"].items() if "balance" in m]
    if learned:
        lines.append("")
        for name, m in learned:
            lines.append(f"- {name}: net {m['net']}, balance {m['balance']}, lr {m['lr']:.2g} for every stage")
    return "\n".join(lines) + "\n"


#: How many pairs ``losing_pairs`` lists.
LOSING_PAIRS = 3


def losing_pairs(all_scores: dict[str, PairScores], learner: str) -> dict:
    """The pairs where ``learner`` loses most to the better classical method of the whole clip on the moving pixels
    (their EPE summed, px), each with the share of its moving pixels where the reference passes its own test and how
    well the reference, the learner and that method explain the frames there (the photometric error over those
    moving pixels): what the whole clip's ratio hinges on, and how far the reference can be trusted there (tree.avi's
    hinges on one pair of a fast, blurred hand, whose reference warps the current frame back to two hands)."""
    ours = all_scores[learner]
    classical = min(CLASSICAL, key=lambda name: all_scores[name].window(None)["epe_moving"])
    theirs = all_scores[classical]
    matched = ~ours.clip.unmatched
    excess = np.where(matched, ours.moving[:, 0] - theirs.moving[:, 0], -np.inf)
    rows = [
        {
            "pair": int(t),
            "moving_pixels": int(ours.moving[t, 1]),
            "consistent_share": float(ours.consistent[t, 1] / ours.moving[t, 1]),
            "learner": float(ours.moving[t, 0]),
            "classical": float(theirs.moving[t, 0]),
            "photometric": {
                "reference": _reference_photometric(ours.clip, int(t)),
                "learner": float(ours.moving_photo[t]),
                "classical": float(theirs.moving_photo[t]),
            },
        }
        for t in np.argsort(-excess)[:LOSING_PAIRS]
        if excess[t] > 0
    ]
    difference = float(ours.moving[matched, 0].sum() - theirs.moving[matched, 0].sum())
    return {"learner": learner, "classical": classical, "clip_difference": difference, "pairs": rows}


def _reference_photometric(clip: Clip, t: int) -> float:
    """How well the pseudo-GT of pair ``t`` explains the frames over its moving pixels (``PairScores.moving_photo``)."""
    gt = clip.pseudo_gt[t]
    return float(photometric_residual(clip.frames[t], clip.frames[t + 1], gt)[motion_mask(gt)].mean())


def losing_pairs_table(losing: dict) -> list[str]:
    """``losing_pairs`` in words and as a markdown table."""
    learner, classical = losing["learner"], losing["classical"]
    difference = losing["clip_difference"]
    said = (
        f"Over the whole clip the EPE of {learner} summed over the moving pixels is {abs(difference):,.0f} px "
        f"{'below' if difference < 0 else 'above'} that of {classical}, the better classical method there"
    )
    if not losing["pairs"]:
        return ["", said + "; it is above on no pair."]
    lines = ["", said + "; the pairs where it is furthest above (photometric: the mean |current frame warped back "
             "by the flow - previous frame| over the moving pixels, intensities 0-1, of the reference, the learner "
             "and the classical method; a reference far above the learner there explains the frames worse than the "
             "flow it scores, though a lower error alone does not make a flow right):", "",
             f"| pair | moving pixels | reference consistent | {learner} | {classical} | difference | photometric |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in losing["pairs"]:
        photo = " / ".join(f"{r['photometric'][k]:.3f}" for k in ("reference", "learner", "classical"))
        cells = (r["pair"], f"{r['moving_pixels']:,}", f"{100 * r['consistent_share']:.0f} %", f"{r['learner']:,.0f}",
                 f"{r['classical']:,.0f}", f"{r['learner'] - r['classical']:+,.0f}", photo)  # fmt: skip
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return lines


def versus_classical(methods: dict[str, dict], window: str) -> dict[str, dict[str, float]]:
    """Per learner, its EPE (``RATIOS``: all, moving and fast pixels, the last two also where the pseudo-GT is
    consistent) over the better of Farneback's and DIS-fast's in ``window`` (< 1: the learner wins; NaN where the
    window has no such pixel)."""
    return _versus(methods, window, lambda score: min(methods[c][window][score] for c in CLASSICAL))


def versus_as_shipped(methods: dict[str, dict], window: str) -> dict[str, dict[str, float]]:
    """Per learner, its EPE (``RATIOS``) over the net's as shipped (``AS_SHIPPED``) in ``window`` (< 1: the service's
    feed and learning paid); none where the run has no such net."""
    if AS_SHIPPED not in methods:
        return {}
    return _versus(methods, window, lambda score: methods[AS_SHIPPED][window][score])


def _versus(methods: dict[str, dict], window: str, baseline: Callable[[str], float]) -> dict[str, dict[str, float]]:
    """Per learner (a method with a pipeline ``balance``), each of its ``RATIOS`` scores over ``baseline(score)``."""
    learners = {name: m[window] for name, m in methods.items() if "balance" in m}
    bases = {score: baseline(score) for score in RATIOS} if learners else {}
    return {
        name: {s: w[s] / base if base > 0 else float("nan") for s, base in bases.items()}
        for name, w in learners.items()
    }


def ratio_table(ratios: dict[str, dict[str, float]], against: str) -> list[str]:
    """Ratios (``versus_classical``, ``versus_as_shipped``) as markdown rows (none without a learner)."""
    if not ratios:
        return []
    lines = ["", f"| learner / {against} | " + " | ".join(RATIOS.values()) + " |"]
    lines.append("|---" * (len(RATIOS) + 1) + "|")
    for name, r in ratios.items():
        lines.append(f"| {name} | " + " | ".join(f"{r[score]:.2f}" for score in RATIOS) + " |")
    return lines
