"""The frame budget a stream keeps: which learning size its worker can hold at the stream's rate, measured.

Every frame the worker reports how long its whole work on that frame took (the pipeline step, scaling, the zero-flow
baseline, the pictures for viewers). After a short warm-up the controller looks at a window of these times; with
automatic sizing it then moves along the ladder of learning sizes (largest first) to the largest one whose work
stays within ``TARGET`` of ΔS: down when the work is over it (straight to the size the measured cost predicts), up
one size when a window leaves room for the next one. Each window is judged afresh, so a change in the machine's load
(another process, a viewer asking for more pictures) moves the size again. Down at once when a window is over ΔS
itself (frames are about to be dropped); over ``TARGET`` but within ΔS (headroom spent, no frame lost), only when the
window before was over it too, or none at this size has held yet: on a shared machine single 2 s windows of slowness
come and go, and each move costs a rebuild, but a size on trial gets no such credit. A size that was too slow is not
retried for ``RETRY_S``, doubled each time it is found too slow again (up to ``RETRY_MAX_S``): a passing burst (a
browser opening the page) costs seconds at a smaller size, not minutes, and a size that keeps failing is left alone.
With a fixed size nothing moves, but the note still says whether it holds.

Cost model: a frame's work is a part that grows with the learning size (the pipeline step) and a part that does not
(scaling the picture down, the pictures at the picture's size): both measured. A step is not proportional to the
pixels: a small net's step is largely per-op overhead, and a net runs the same ops at every size, so a model
proportional to pixels sends a stream that was slow at a large size far too low, and then never finds room to grow.
The step's cost is modelled as affine in the pixels, fitted to the last window of every size measured so far; its
level follows the current size's latest window (a changed machine load scales every size alike). With one size
measured, it is scaled by pixels. It only picks the next size to try; the next window measures it, and a larger size
never measured in the stream is tried when the current one leaves room. The step's part is what the host spends on
the step (``frame_loop.FrameLoop``): on a GPU, where the step runs beside the host's work, only its wait for the device.

The fit is only as good as its windows agree: windows taken under different loads (another stream starting on the
same cores, a burst) can show a larger size cheaper than a smaller one, which no step does, and a fit through them
ran flat or downhill, so a stream whose smallest size was measured during a burst went back to its largest and stayed
there, dropping frames, for as long as it ran. Where a larger size measured cheaper than a smaller one by more than
``SAME_COST``, only the current size's window is kept; and a window older than ``STALE_S`` no longer speaks for its
size (the load has had time to change), so a size measured in a burst is tried again.

Where no size is expected to hold, the stream learns at the cheapest one, and of sizes that cost about the same
(within ``SAME_COST``) at the largest: on a GPU a small net's step costs nearly the same at every size (launches,
not pixels), and a fit without a positive slope is taken as such a flat cost. A stream there once fell to the
smallest size, as slow as the largest, and stayed.

Sizes above a cap are off limits while a stream's motion would outrun the net's search there (``reach.MotionCap``,
``limit``): the controller moves under the cap at once, and when the cap lifts it goes back to the size it left.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from ..sizing import Size

TARGET = 0.85  # a frame's work at most this share of ΔS: headroom for the decoder, the API process and jitter
GROW_MARGIN = 0.8  # grow only when the next size is predicted to need at most this share of the target
WARMUP_FRAMES = 3  # after a (re)build: first steps allocate, the pipeline fills
WINDOW_S = 2.0  # seconds of frames per decision
MIN_WINDOW = 6  # frames per decision at least (slow rates)
RETRY_S = 15.0  # a size found too slow is not tried again for this long (doubled each time it is again)
RETRY_MAX_S = 240.0  # the longest wait before a size that keeps failing is tried again
PACE_STEP = 0.1  # the source's pace moves ΔS only when it differs from it by more than this share
SAME_COST = 1.05  # predicted costs within this factor of the cheapest count as the same (measurements are noisy)
#: A window at another size older than this no longer counts in the fit. Long beside the retry waits: a size whose
#: window goes stale is tried again, a rebuild each way (every 4 min, 10 moves in 20 simulated minutes of a noisy
#: stream at 10 fps against 2; every 10 min, 4).
STALE_S = 600.0


def pixels(size: Size) -> int:
    return size[0] * size[1]


class Window(NamedTuple):
    """The last window measured at a size: a step's cost there, and when it ended (the controller's ``clock``)."""

    step: float
    ended: float


class BudgetController:
    """Chooses the learning size from ``ladder`` (largest first) for a stream at ``fps``; ``auto=False`` keeps
    ``ladder[start]`` and only reports."""

    def __init__(self, ladder: Sequence[Size], start: int, fps: float, auto: bool,
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        if not ladder or not 0 <= start < len(ladder):
            raise ValueError(f"start {start} is not a size of the ladder {list(ladder)}")
        self.ladder = list(ladder)
        self.index = start
        self.said = 1.0 / fps  # ΔS as the stream's rate has it
        self.auto = auto
        self._time_frames(self.said)
        self.clock = clock
        self.samples: list[tuple[float, float]] = []
        self.seen = 0
        self.estimate: float | None = None  # a frame's work at the current size, from the last full window
        self.fixed = 0.0  # the part of it that does not depend on the learning size
        self.settled = False  # a window held the budget at this size
        self._too_slow: dict[int, tuple[float, float]] = {}  # ladder index -> (when found too slow, wait to retry)
        self._over = True  # the last window at this size was over the target, or none held it yet (see _move)
        self._windows: dict[int, Window] = {}  # ladder index -> the last window at that size
        self.hopeless = False  # no size was expected to hold the budget at the last decision
        self.top = 0  # the largest size allowed (``limit``)
        self.resume: int | None = None  # the size a cap moved the stream from, to go back to when it lifts

    @property
    def size(self) -> Size:
        return self.ladder[self.index]

    @property
    def fps(self) -> float:
        return 1.0 / self.ds

    @property
    def source_slower(self) -> bool:
        """The source sends frames further apart than its rate says (``pace``)."""
        return self.ds > self.said

    def pace(self, interval: float | None) -> None:
        """The source's own time between frames (``source_pace.SourcePace``): where it is longer than the stream's
        rate says, each frame has that long. Moved only by more than ``PACE_STEP``, so that a source's jitter does not
        rewrite the note every frame."""
        ds = max(self.said, interval or 0.0)
        if abs(ds / self.ds - 1) > PACE_STEP:
            self._time_frames(ds)

    def _time_frames(self, ds: float) -> None:
        """ΔS, the time a frame has, and the frames a decision looks at (``WINDOW_S`` of them)."""
        self.ds = ds
        self.window = max(MIN_WINDOW, round(WINDOW_S / ds))

    def observe(self, work_s: float, step_s: float | None = None) -> int | None:
        """One frame's work at the current size (``step_s`` of it grows with the size: the pipeline step; default:
        all of it); the ladder index to rebuild at when the size must change."""
        self.seen += 1
        if self.seen <= WARMUP_FRAMES:
            return None
        self.samples.append((work_s, work_s if step_s is None else min(step_s, work_s)))
        if not self._window_full():
            return None
        work, step = np.array(self.samples).T
        self.estimate = float(np.percentile(work, 75))  # most frames, not the lucky half
        self._windows[self.index] = Window(float(np.percentile(step, 75)), self.clock())
        self._forget_other_loads()
        self.fixed = max(0.0, self.estimate - self._windows[self.index].step)
        self.samples.clear()
        choice = self._choose(self.estimate) if self.auto else self.index
        self.settled = choice == self.index and self.estimate <= TARGET * self.ds
        if choice == self.index:
            return None
        self._move(choice)
        return choice

    def _window_full(self) -> bool:
        """``WINDOW_S`` of the stream's time measured: the frames ΔS brings in that time (``window``), or, where frames
        take longer than ΔS, as many as fill it with their own work (``MIN_WINDOW`` at least). Counted in frames at the
        stream's rate alone, a stream at 30 fps taking 300 ms a frame waited 18 s for its first decision."""
        if len(self.samples) >= self.window:
            return True
        spent = sum(max(work, self.ds) for work, _ in self.samples)
        return len(self.samples) >= MIN_WINDOW and spent >= WINDOW_S

    def limit(self, top: int) -> int | None:
        """Sizes larger than ``ladder[top]`` are off limits from now on (automatic sizing only); the ladder index to
        rebuild at when the size must change: under a new cap, or back to where the last cap found it once it lifts."""
        if not self.auto:
            return None
        self.top = top
        if top > self.index:
            self.resume = self.index if self.resume is None else self.resume
            self._move(top)
            return top
        if self.resume is not None and top < self.index:
            back = max(top, self.resume)
            self.resume = None if back == self.resume else self.resume
            self._move(back)
            return back
        return None

    @property
    def capped(self) -> bool:
        """The size is below where the budget had it because of a cap (``limit``)."""
        return self.resume is not None

    def _forget_other_loads(self) -> None:
        """Keep only the windows that can speak for their sizes now: none older than ``STALE_S``, and, where a larger
        size measured cheaper than a smaller one (by more than ``SAME_COST``), the current size's alone (module
        docstring)."""
        now = self.clock()
        windows = self._windows
        for i in [i for i, w in windows.items() if i != self.index and now - w.ended > STALE_S]:
            del windows[i]
        by_size = sorted(windows, key=lambda i: pixels(self.ladder[i]))
        smaller_dearer = any(
            windows[small].step > SAME_COST * windows[large].step
            for n, small in enumerate(by_size)
            for large in by_size[n + 1 :]
            if pixels(self.ladder[large]) > pixels(self.ladder[small])
        )
        if smaller_dearer:
            self._windows = {self.index: windows[self.index]}

    def predict(self, index: int) -> float:
        """A frame's work at ``ladder[index]``: the current size's fixed part plus the step there (module docstring)."""
        assert self.estimate is not None
        return self.fixed + self._windows[self.index].step * self._step_ratio(index)

    def _step_ratio(self, index: int) -> float:
        """A step at ``ladder[index]`` over one at the current size: by the affine fit to the sizes measured (flat
        when it has no positive slope), or by pixels while only one size is measured."""
        here, there = pixels(self.size), pixels(self.ladder[index])
        if len(self._windows) < 2:
            return there / here
        sizes, steps = [pixels(self.ladder[i]) for i in self._windows], [w.step for w in self._windows.values()]
        slope, intercept = np.polyfit(sizes, steps, 1)
        if slope <= 0:
            return 1.0
        intercept = max(float(intercept), 0.0)  # a negative intercept is noise: none
        return float((intercept + slope * there) / (intercept + slope * here))

    def _choose(self, estimate: float) -> int:
        limit = TARGET * self.ds
        over = estimate > limit
        sustained = over and self._over  # this window and the one before it (or a size on trial) are over
        self._over = over
        self.hopeless = False
        if estimate > self.ds or sustained:
            self._mark_too_slow(self.index)
            for j in range(self.index + 1, len(self.ladder)):
                if self.predict(j) <= limit:
                    return j
            self.hopeless = True
            return self._cheapest()
        up = self.index - 1
        if over or up < self.top or self._waiting(up):
            return self.index
        if up in self._windows:
            return up if self.predict(up) <= GROW_MARGIN * limit else self.index
        # A size never measured in this stream is tried (a window there tells) when even a step that grew with every
        # pixel would keep within ΔS there, so that the trial drops no frame: a prediction from one size, or from a
        # first window slowed by the start, would keep the stream low for good.
        worst = self.fixed + self._windows[self.index].step * pixels(self.ladder[up]) / pixels(self.size)
        return up if worst <= self.ds else self.index

    def _cheapest(self) -> int:
        """Where no size holds: the largest size predicted to cost about as little as the cheapest (every size is too
        slow alike, so none is waited for)."""
        allowed = range(self.top, len(self.ladder))
        least = min(self.predict(j) for j in allowed)
        return next(j for j in allowed if self.predict(j) <= SAME_COST * least)

    def _mark_too_slow(self, index: int) -> None:
        before = self._too_slow.get(index)
        wait = RETRY_S if before is None else min(RETRY_MAX_S, 2 * before[1])
        self._too_slow[index] = (self.clock(), wait)

    def _waiting(self, index: int) -> bool:
        """``ladder[index]`` was too slow and its wait to be tried again is not over."""
        if index not in self._too_slow:
            return False
        when, wait = self._too_slow[index]
        return self.clock() - when < wait

    def _move(self, index: int) -> None:
        self.index = index
        self._over = True  # a size is given the benefit of one slow window only once it has held one
        self.estimate = None  # measured at another size
        self.seen = 0
        self.samples.clear()

    def new_ladder(self, ladder: Sequence[Size]) -> None:
        """The sizes of a picture of another shape: the stream goes on at the one with the most pixels no more than the
        current size's (about its cost); what was measured at the old sizes is dropped, the source's pace kept."""
        here = pixels(self.size)
        self.ladder = list(ladder)
        self._windows.clear()
        self._too_slow.clear()
        self.top, self.resume, self.hopeless, self.settled = 0, None, False, False
        self._move(next((i for i, size in enumerate(self.ladder) if pixels(size) <= here), len(self.ladder) - 1))

    def note(self) -> str:
        """The state of the budget in words, as the API and the page show it."""
        w, h = self.size
        fps, ds_ms = self.fps, self.ds * 1e3
        why = "; no larger while the motion is this fast (it would outrun the net's search)" if self.capped else ""
        if self.estimate is None:
            return f"learning at {w}×{h}; measuring what a frame costs{why}"
        sent = f"; the source sends that, though it says {1 / self.said:.4g} fps" if self.source_slower else ""
        cost = f"a frame's work takes {self.estimate * 1e3:.0f} ms of {ds_ms:.0f} ms"
        if self.estimate <= TARGET * self.ds:
            keep = "to keep" if self.auto else "as asked, keeping"
            return f"learning at {w}×{h} {keep} {fps:.4g} fps ({cost}){why}{sent}"
        holdable = max(0.1, int(10 * TARGET / self.estimate) / 10)
        dropped = round(100 * (1 - self.ds / self.estimate)) if self.estimate > self.ds else 0
        headroom = f"over the {TARGET * 100:.0f} % a stream may take"  # no frame lost, but no room for jitter
        lost = f"so about {dropped} % of frames are dropped" if dropped else headroom
        if self.auto and (self.hopeless or self.index == len(self.ladder) - 1):
            return f"cannot keep {fps:.4g} fps: even at {w}×{h} {cost}, {lost}; ask for at most {holdable:g} fps{sent}"
        if self.auto:
            return f"learning at {w}×{h}: {cost}; a smaller size if that goes on{sent}"
        return (f"{w}×{h} as asked cannot keep {fps:.4g} fps: {cost}, {lost}; use automatic sizing or at most "
                f"{holdable:g} fps{sent}")  # fmt: skip
