"""What ``bench.adaptation`` writes besides each run's json: a stream's table and plot (adapting / frozen over the
stream), a clip's table, and the set's summary with the issue's targets as measured, read from the rows run now and
those an earlier run left (a set run in parts sums up whole)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from models.camera_shifts import SHIFTS

#: The learners set against the frozen net: the service's adapting learner, sequential and as two PARTIME stages.
LEARNERS = ("adapting", "adapting_d2")


def plot(results: dict[str, dict], title: str):
    """Each learner's error over the frozen net's, 25-pair running means."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.2))
    kernel = np.ones(25) / 25
    frozen = np.convolve(results["frozen"]["pairs"], kernel, mode="valid")
    for name, r in results.items():
        if name != "frozen":
            ax.plot(np.convolve(r["pairs"], kernel, mode="valid") / frozen, label=f"{name} / frozen", lw=1)
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xlabel("pair (25-pair running means)")
    ax.set_ylabel("end-point error / frozen's")
    ax.set_title(title, fontsize=8)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def markdown(results: dict[str, dict]) -> str:
    lines = ["| learner | first 100 | last 100 | whole | / frozen: first 100 | last 100 | whole | each 100 |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    frozen = results["frozen"]
    for name, r in results.items():
        ratios = " | ".join(f"{r[w] / frozen[w]:.3f}" for w in ("first100", "last100", "whole"))
        each = " ".join(f"{a / b:.2f}" for a, b in zip(r["per100"], frozen["per100"], strict=True))
        lines.append(f"| {name} | {r['first100']:.3f} | {r['last100']:.3f} | {r['whole']:.3f} | {ratios} | {each} |")
    return "\n".join(lines) + "\n"


#: The real clips' scores compared: all pixels, and the moving pixels where the reference passes its own test.
CLIP_SCORES = {"epe_all": "all pixels", "epe_moving_consistent": "moving, consistent"}


def versus_frozen(methods: dict[str, dict], window: str) -> dict[str, dict[str, float]]:
    """Per adapting learner, its score over the frozen net's in ``window`` (< 1: learning paid)."""
    frozen = methods["frozen"][window]
    return {name: {s: methods[name][window][s] / frozen[s] if frozen[s] > 0 else float("nan") for s in CLIP_SCORES}
            for name in LEARNERS}  # fmt: skip


def clip_markdown(result: dict) -> str:
    lines = ["| learner | window | " + " | ".join(f"{v}: EPE, / frozen, / better classical" for v in
                                                 CLIP_SCORES.values()) + " |",
             "|---|---|---|---|"]  # fmt: skip
    for name in ("frozen", *LEARNERS):
        for window in result["versus_frozen"]:
            m = result["methods"][name][window]
            vf = result["versus_frozen"][window].get(name, dict.fromkeys(CLIP_SCORES, 1.0))
            vc = result["versus_classical"][window].get(name, {})
            cells = (f"{m[s]:.3f}, {vf[s]:.3f}, {vc.get(s, float('nan')):.3f}" for s in CLIP_SCORES)
            lines.append(f"| {name} | {window} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def summary(streams: dict[str, dict], clips: dict[str, dict]) -> tuple[str, dict]:
    """Per stream adapting / frozen per window and D = 2 / D = 1; the issue's targets as measured."""
    rows, data = [], {"streams": {}, "clips": {}}
    for name, r in streams.items():
        f = r["frozen"]
        ratios = {learner: {w: r[learner][w] / f[w] for w in ("first100", "last100", "whole")} for learner in LEARNERS}
        worst = max(max(a / b for a, b in zip(r[learner]["per100"], f["per100"], strict=True)) for learner in LEARNERS)
        d2 = r["adapting_d2"]["whole"] / r["adapting"]["whole"]
        data["streams"][name] = {"ratios": ratios, "worst_per100": worst, "d2_over_d1_whole": d2}
        a = ratios["adapting"]
        rows.append(f"| {name} | {f['last100']:.3f} | {a['first100']:.3f} | {a['last100']:.3f} | {a['whole']:.3f} "
                    f"| {ratios['adapting_d2']['last100']:.3f} | {worst:.3f} | {d2:.3f} "
                    f"| {r['started']} |")  # fmt: skip
    lines = ["## Exact-flow streams", "",
             "| stream | frozen last 100 (px) | adapting / frozen: first 100 | last 100 | whole | D = 2 last 100 "
             "| worst 100 of either | D = 2 / D = 1 whole | run |", "|---" * 9 + "|", *rows]  # fmt: skip
    unshifted = [v["ratios"]["adapting"]["last100"] for k, v in data["streams"].items()
                 if not any(k.endswith(f"-{s}") for s in SHIFTS) and not k.startswith("long")]  # fmt: skip
    shifted = {k: v["ratios"]["adapting"]["last100"] for k, v in data["streams"].items()
               if any(k.endswith(f"-{s}") for s in SHIFTS)}  # fmt: skip
    data["targets"] = {
        "unshifted_last100_median": float(np.median(unshifted)) if unshifted else None,
        "shifted_last100": shifted,
        "never_worse_max": max((v["worst_per100"] for v in data["streams"].values()), default=None),
        "d2_over_d1_max": max((v["d2_over_d1_whole"] for v in data["streams"].values()), default=None),
    }
    t = data["targets"]
    if unshifted:
        lines += ["", f"- unshifted, last 100 pairs, adapting / frozen: median {t['unshifted_last100_median']:.3f}"]
    if streams:
        lines += [f"- the worst 100 pairs of either learner on any stream, over frozen's: {t['never_worse_max']:.3f}",
                  f"- D = 2 / D = 1 over a whole stream, worst: {t['d2_over_d1_max']:.3f}"]  # fmt: skip
    if clips:
        lines += ["", "## Real clips", "", "| clip | window | learner | all: / frozen | / better classical "
                  "| moving consistent: / frozen | / better classical | run |", "|---" * 8 + "|"]  # fmt: skip
        for stem, c in clips.items():
            data["clips"][stem] = {"versus_frozen": c["versus_frozen"], "versus_classical": c["versus_classical"]}
            for window in c["versus_frozen"]:
                for learner in LEARNERS:
                    vf, vc = c["versus_frozen"][window][learner], c["versus_classical"][window][learner]
                    cells = (vf["epe_all"], vc["epe_all"], vf["epe_moving_consistent"], vc["epe_moving_consistent"])
                    row = " | ".join(f"{v:.3f}" for v in cells)
                    lines.append(f"| {c['clip']} | {window} | {learner} | {row} | {c['started']} |")
    return "\n".join(lines) + "\n", data


def with_kept(out: Path, names: list[str], ran: dict[str, dict]) -> dict[str, dict]:
    """In ``names``' order, the results of those ``ran`` now, else as an earlier run left them in ``out`` (where it
    left any): a set run in parts sums up whole."""
    files = {name: out / f"{name}.json" for name in names if name not in ran}
    return {name: ran[name] if name in ran else json.loads(files[name].read_text())
            for name in names if name in ran or files[name].is_file()}  # fmt: skip
