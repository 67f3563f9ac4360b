"""Lay a schedule out without running it: print it, and refuse it before any frame goes in.

A schedule is data (per step, each stage's actions), so one epoch of it can be played on symbols
instead of tensors, as ``torch.distributed.pipelining`` validates its action lists. The play
follows what the runtimes do: a stage runs its actions in order and a receive waits for its
message (the round robin of ``LocalRuntime.enqueue``); what each action needs and leaves mirrors
``Stage``. A schedule is refused (``ScheduleError``) when a stage would wait forever, a message goes
to nobody, a stage acts on something it does not have, or a sample is not forwarded (and, when
learning, backpropagated) on every stage.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field

from ..errors import ScheduleError
from .base import SENDS, Action, Op, Schedule, StepActions, micro_id
from .registry import make_schedule

Message = tuple[str, int, int]  # (kind, receiving stage, frame or micro-batch id)

#: How an action is written in a rendered layout (lower-case forward: no graph kept).
_CODES = {
    Op.INPUT: "in",
    Op.RECV_ACT: "ra",
    Op.STASH: "st",
    Op.FORWARD: "F",
    Op.RECOMPUTE: "R",
    Op.SEND_ACT: "sa",
    Op.OUTPUT: "out",
    Op.LOSS: "L",
    Op.RECV_GRAD: "rg",
    Op.BACKWARD: "B",
    Op.SEND_GRAD: "sg",
    Op.UPDATE: "U",
}
LEGEND = (
    "in: input  ra/sa: receive/send activation  F/f: forward with/without graph  st: stash  "
    "R: recompute  out: output  L: loss  rg/sg: receive/send gradient  B: backward (<label)  U: update"
)


def code(action: Action) -> str:
    """A short name for ``action``: op code, frame, the gradient label of a backward."""
    name = _CODES[action.op]
    if action.op is Op.FORWARD and not action.grad:
        name = "f"
    if action.op is Op.UPDATE:
        return name
    label = action.grad_frame if action.op is Op.RECV_GRAD else action.frame
    text = f"{name}{label}"
    if action.op is Op.BACKWARD and action.grad_frame != action.frame:
        text += f"<{action.grad_frame}"
    return text + ("~" if action.stale else "")


@dataclass(frozen=True)
class Layout:
    """One epoch of a schedule: ``frames`` fed, then its drain steps."""

    schedule: str
    stages: int
    frames: int
    learn: bool
    steps: list[StepActions]

    def render(self) -> str:
        """A table: one row per step, one column per stage."""
        header = ["step", *(f"stage {h}" for h in range(self.stages))]
        rows = [
            [str(t), *(" ".join(code(a) for a in acts) or "-" for acts in plan)] for t, plan in enumerate(self.steps)
        ]
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
        lines = [f"{self.schedule}: {self.stages} stages, {self.frames} frames, learn={self.learn}"]
        lines += [" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [header, *rows]]
        lines.insert(2, "-+-".join("-" * w for w in widths))
        return "\n".join([*lines, LEGEND])


def resolve(schedule: str | Schedule, stages: int | None) -> Schedule:
    """A schedule by name (with ``stages``) or an instance (checked against ``stages`` if given)."""
    if isinstance(schedule, str) and stages is None:
        raise ValueError(f"schedule {schedule!r} by name needs a number of stages")
    return schedule if stages is None else make_schedule(schedule, stages)


def lay_out(
    schedule: str | Schedule, stages: int | None = None, frames: int | None = None, learn: bool = True
) -> Layout:
    """The actions of an epoch of ``frames`` (default: enough to fill, run steady and drain)."""
    schedule = resolve(schedule, stages)
    frames = 4 * schedule.stages + 4 if frames is None else frames
    steps = [schedule.actions(t, None, learn) for t in range(frames)]
    steps += [schedule.actions(t, frames - 1, learn) for t in range(frames, frames + schedule.drain_steps())]
    return Layout(schedule.name or type(schedule).__name__, schedule.stages, frames, learn, steps)


def validate(
    schedule: str | Schedule, stages: int | None = None, frames: int | None = None, learn: bool = True
) -> Layout:
    """The layout of ``schedule`` (as :func:`lay_out`), or ``ScheduleError`` saying what is wrong."""
    schedule = resolve(schedule, stages)
    layout = lay_out(schedule, frames=frames, learn=learn)
    play = _Play(layout.stages, schedule.intra_step_messages, learn)
    play.run(layout.steps)
    problems = play.problems or _coverage(play, layout) + _unreceived(play, schedule, len(layout.steps))
    if problems:
        shown = "\n  ".join(problems[:8]) + (f"\n  ... and {len(problems) - 8} more" if len(problems) > 8 else "")
        raise ScheduleError(f"schedule {layout.schedule!r} ({layout.stages} stages) cannot run:\n  {shown}")
    return layout


_SEND_OF = {kind: op for op, (kind, _) in SENDS.items()}


def _unreceived(play: _Play, schedule: Schedule, steps: int) -> list[str]:
    """A message nobody received in the epoch must be one the stream would have used had it gone
    on (the transport drops those at the end of an epoch); otherwise it goes to nobody."""
    stream = _Play(play.depth, schedule.intra_step_messages, play.learn)
    stream.run([schedule.actions(t, None, play.learn) for t in range(steps + 2 * play.depth + 2)])
    return [
        f"stage {h - SENDS[_SEND_OF[kind]][1]} sends {kind} of {f} (step {play.sent[(kind, h, f)]}) to stage {h}, "
        "which never receives it"
        for kind, h, f in sorted(play.pending)
        if (kind, h, f) not in stream.received
    ]


@dataclass
class _StageState:
    """What a stage holds between actions, by frame: the symbols of ``Stage``'s dictionaries."""

    inputs: set[int] = field(default_factory=set)
    stash: set[int] = field(default_factory=set)
    outputs: set[int] = field(default_factory=set)
    graphs: set[int] = field(default_factory=set)
    grads: set[int] = field(default_factory=set)  # received output gradients, and losses, by label
    input_grads: set[int] = field(default_factory=set)
    forwards: Counter[int] = field(default_factory=Counter)
    backwards: Counter[int] = field(default_factory=Counter)
    updates: int = 0


class _Play:
    """One epoch played on symbols: which messages exist, what each stage holds."""

    def __init__(self, stages: int, intra_step: bool, learn: bool) -> None:
        self.depth = stages
        self.learn = learn
        self.intra_step = intra_step
        self.state = [_StageState() for _ in range(stages)]
        self.fed: list[int] = []  # samples (frames or micro-batch ids) taken in, in order
        self.outputs: Counter[int] = Counter()
        self.losses: Counter[int] = Counter()
        self.sent: dict[Message, int] = {}  # message -> step it was sent in
        self.pending: set[Message] = set()
        self.received: set[Message] = set()
        self.problems: list[str] = []

    def run(self, steps: list[StepActions]) -> None:
        for t, plan in enumerate(steps):
            if len(plan) != self.depth:
                self.problems.append(f"step {t}: {len(plan)} action lists for {self.depth} stages")
                return
            if not self._step(t, plan):
                return

    def _step(self, t: int, plan: StepActions) -> bool:
        """Round robin over stages (each in order; a receive waits); False once stuck or wrong."""
        queues = [deque(actions) for actions in plan]
        while any(queues):
            progressed = False
            for h, queue in enumerate(queues):
                while queue and self._can_run(h, queue[0]):
                    if not self._act(t, h, queue.popleft()):
                        return False
                    progressed = True
            if not progressed:
                waits = ", ".join(f"stage {h} at {q[0]}" for h, q in enumerate(queues) if q)
                self.problems.append(f"step {t}: deadlock, waiting for messages never sent: {waits}")
                return False
        return True

    def _can_run(self, h: int, action: Action) -> bool:
        message = _received(h, action)
        return message is None or message in self.pending

    def _act(self, t: int, h: int, a: Action) -> bool:
        """Apply ``a`` to stage h's symbols; False (with a problem) when it needs what is not there."""
        s, f = self.state[h], a.frame
        missing = None
        if (message := _received(h, a)) is not None:
            if not self.intra_step and self.sent[message] == t:
                self.problems.append(f"step {t}: stage {h} at {a} receives what was sent in the same step")
                return False
            self.pending.discard(message)
            self.received.add(message)
        if a.op is Op.INPUT:
            if h != 0:
                missing = "an input (only stage 0 takes the pipeline's input)"
            samples = [micro_id(f, m, a.chunks) for m in range(a.chunks)] if a.chunks > 1 else [f]
            s.inputs.update(samples)
            self.fed += samples
        elif a.op is Op.RECV_ACT:
            s.inputs.add(f)
        elif a.op is Op.STASH:
            missing = _take(s.inputs, f, "the input of", keep=True)
            s.stash.add(f)
        elif a.op is Op.FORWARD:
            missing = _take(s.inputs, f, "the input of")
            s.forwards[f] += 1
            s.outputs.add(f)
            if a.grad:
                s.graphs.add(f)
        elif a.op is Op.RECOMPUTE:
            missing = _take(s.stash, f, "the stashed input of")
            s.graphs.add(f)
        elif a.op is Op.SEND_ACT:
            missing = _take(s.outputs, f, "the output of") or self._send(t, h, a)
        elif a.op is Op.OUTPUT:
            missing = _take(s.outputs, f, "the output of") or self._last(h)
            self.outputs[f] += 1
        elif a.op is Op.LOSS:
            missing = _take(s.graphs, f, "the graph of", keep=True) or self._last(h)
            self.losses[f] += 1
            s.grads.add(f)
        elif a.op is Op.RECV_GRAD:
            assert a.grad_frame is not None
            s.grads.add(a.grad_frame)
        elif a.op is Op.BACKWARD:
            missing = _take(s.graphs, f, "the graph of") or _take(s.grads, a.grad_frame, "the gradient labelled")
            s.backwards[f] += 1
            if h > 0:
                s.input_grads.add(f)
        elif a.op is Op.SEND_GRAD:
            missing = _take(s.input_grads, f, "the input gradient of") or self._send(t, h, a)
        elif a.op is Op.UPDATE:
            s.updates += 1
        if missing:
            self.problems.append(f"step {t}: stage {h} at {a} needs {missing}")
            return False
        return True

    def _last(self, h: int) -> str | None:
        return None if h == self.depth - 1 else "to be the last stage"

    def _send(self, t: int, h: int, a: Action) -> str | None:
        kind, offset = SENDS[a.op]
        to = h + offset
        if not 0 <= to < self.depth:
            return f"a stage {to} to send {kind} to"
        message = (kind, to, a.frame)
        if message in self.pending:
            return f"stage {to} to have received the {kind} of {a.frame} sent before"
        self.sent[message] = t
        self.pending.add(message)
        return None


def _received(h: int, action: Action) -> Message | None:
    """The message ``action`` waits for, if it is a receive."""
    if action.op is Op.RECV_ACT:
        return ("act", h, action.frame)
    if action.op is Op.RECV_GRAD:
        assert action.grad_frame is not None
        return ("grad", h, action.grad_frame)
    return None


def _take(pool: set[int], frame: int | None, what: str, keep: bool = False) -> str | None:
    """Remove ``frame`` from ``pool`` (unless ``keep``); what is missing, if it is not there."""
    if frame not in pool:
        return f"{what} {frame}, which it does not hold"
    if not keep:
        pool.discard(frame)
    return None


def _coverage(play: _Play, layout: Layout) -> list[str]:
    """Every sample forwarded once on every stage and output once; when learning, its loss taken
    once, every stage learning, and (after a stage's first backward) none skipped."""
    problems = []
    fed = play.fed
    if len(set(fed)) != len(fed):
        problems.append("some frames are taken in twice")
    for h, s in enumerate(play.state):
        wrong = sorted(u for u in set(fed) | set(s.forwards) if s.forwards[u] != 1)
        if wrong:
            problems.append(f"stage {h} forwards samples {wrong[:6]} {[s.forwards[u] for u in wrong[:6]]} times")
        if s.graphs:
            problems.append(f"stage {h} keeps graphs of {sorted(s.graphs)[:6]} that are never backpropagated")
        if not layout.learn:
            continue
        learned = [u for u in fed if s.backwards[u]]
        if not learned or s.updates == 0:
            problems.append(f"stage {h} never learns")
            continue
        skipped = [u for u in fed[fed.index(learned[0]) :] if not s.backwards[u]]
        if skipped:
            problems.append(f"stage {h} skips the backward of {skipped[:6]} after learning from {learned[0]}")
    outputs = sorted(u for u in set(fed) | set(play.outputs) if play.outputs[u] != 1)
    if outputs:
        problems.append(
            f"outputs of samples {outputs[:6]} are published {[play.outputs[u] for u in outputs[:6]]} times"
        )
    if layout.learn:
        losses = sorted(u for u in set(fed) | set(play.losses) if play.losses[u] != 1)
        if losses:
            problems.append(f"losses of samples {losses[:6]} are taken {[play.losses[u] for u in losses[:6]]} times")
    return problems
