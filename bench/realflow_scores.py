"""A ``bench.realflow`` clip and how one method's flows on it are scored: the frames a learner sees and the reference
they are scored against (``Clip``), and per-pair scores pooled over windows of the clip (``PairScores``). A module of
their own, so that the run (``bench.realflow``) and its report (``bench.realflow_report``) both read them without
importing each other."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from models.flow_metrics import (
    FAST_MOTION,
    end_point_errors,
    f1_score,
    mask_counts,
    motion_mask,
    photometric_residual,
)

#: Score windows: the first 30 pairs (how fast a learner gets useful), the first 100 and the whole clip.
WINDOWS = {"first30": 30, "first100": 100, "all": None}
#: A pair whose pseudo-GT passes its own forward-backward test on under this share of its pixels has no
#: correspondence to score (a scene cut: bench/results/heldout/realflow-bikes-216x88.md, 1-8 % at its five cuts,
#: 90 % at its median pair; at least 60 % on every pair of box and tree): no method is scored there.
MATCHED_SHARE = 0.2


@dataclass(frozen=True)
class Clip:
    """What the learner sees (working-size frames) and what it is scored against."""

    frames: np.ndarray  # uint8 [T, H, W, 3], working size
    pseudo_gt: np.ndarray  # float32 [T-1, H, W, 2], working-size pixels
    consistent: np.ndarray  # bool [T-1, H, W]: where the pseudo-GT passes its forward-backward test
    times: list[float]  # source timestamps of the kept frames, seconds
    info: dict  # source size, rate and codec; decoded and kept frame counts

    @property
    def unmatched(self) -> np.ndarray:
        """bool [T-1]: the pairs with no correspondence to score (``MATCHED_SHARE``)."""
        return self.consistent.reshape(len(self.consistent), -1).mean(axis=1) < MATCHED_SHARE


class PairScores:
    """Per-pair scores of one method, filled in whatever order outputs arrive; windows pool them.

    Pooled rather than averaged per pair: the moving-pixel EPE and the F1 count every moving pixel of a window
    once, so a pair with little motion neither dominates nor leaves a hole (its own F1 may be undefined)."""

    def __init__(self, clip: Clip, shown: set[int]) -> None:
        pairs = len(clip.pseudo_gt)
        self.clip = clip
        self.epe = np.full(pairs, np.nan)  # mean over all pixels
        self.photo = np.full(pairs, np.nan)
        self.moving_photo = np.full(pairs, np.nan)  # the same over the moving pixels alone
        self.loss = np.full(pairs, np.nan)
        self.moving = np.zeros((pairs, 5))  # EPE summed over moving pixels, moving pixels, TP, FP, FN
        self.fast = np.zeros((pairs, 2))  # EPE summed over fast pixels, fast pixels
        self.consistent = np.zeros((pairs, 4))  # the same two over the pixels where the pseudo-GT is consistent
        self.seconds: list[float] = []
        self.shown = shown
        self.flows: dict[int, np.ndarray] = {}  # the pairs drawn on the picture sheet

    def add(self, t: int, flow: np.ndarray, loss: float | None = None) -> None:
        gt, prev, cur = self.clip.pseudo_gt[t], self.clip.frames[t], self.clip.frames[t + 1]
        errors, actual = end_point_errors(flow, gt), motion_mask(gt)
        self.epe[t] = errors.mean()
        residual = photometric_residual(prev, cur, flow)
        self.photo[t] = residual.mean()
        self.moving_photo[t] = residual[actual].mean() if actual.any() else np.nan
        self.moving[t] = (errors[actual].sum(), actual.sum(), *mask_counts(motion_mask(flow), actual))
        fast = motion_mask(gt, FAST_MOTION)
        self.fast[t] = (errors[fast].sum(), fast.sum())
        moving, fast = actual & self.clip.consistent[t], fast & self.clip.consistent[t]
        self.consistent[t] = (errors[moving].sum(), moving.sum(), errors[fast].sum(), fast.sum())
        if loss is not None:
            self.loss[t] = loss
        if t in self.shown:
            self.flows[t] = flow

    def window(self, pairs: int | None) -> dict[str, float]:
        """Scores pooled over the first ``pairs`` pairs (None: all) that have a correspondence (``Clip.unmatched``)."""
        n = len(self.epe) if pairs is None else min(pairs, len(self.epe))
        kept = ~self.clip.unmatched[:n]
        err, count, tp, fp, fn = self.moving[:n][kept].sum(axis=0)
        fast_err, fast_count = self.fast[:n][kept].sum(axis=0)
        sure_err, sure_count, sure_fast_err, sure_fast_count = self.consistent[:n][kept].sum(axis=0)
        return {
            "pairs": int(kept.sum()),
            "unmatched_pairs": int(n - kept.sum()),
            "moving_pixels": int(count),
            "fast_pixels": int(fast_count),
            "consistent_moving_pixels": int(sure_count),
            "consistent_fast_pixels": int(sure_fast_count),
            "epe_all": float(np.nanmean(self.epe[:n][kept])),
            "epe_moving": float(err / count) if count else float("nan"),
            "epe_fast": float(fast_err / fast_count) if fast_count else float("nan"),
            "epe_moving_consistent": float(sure_err / sure_count) if sure_count else float("nan"),
            "epe_fast_consistent": float(sure_fast_err / sure_fast_count) if sure_fast_count else float("nan"),
            "f1_moving": f1_score(tp, fp, fn),
            "photo": float(np.nanmean(self.photo[:n][kept])),
        }

    def summary(self) -> dict:
        return {
            **{name: self.window(pairs) for name, pairs in WINDOWS.items()},
            "scored_pairs": int(np.isfinite(self.epe).sum()),
            "ms_per_pair": 1000 * float(np.median(self.seconds)) if self.seconds else 0.0,
        }
