"""Cyclic Data Parallelism on a pipeline (Fournier & Oyallon): update rules CDP-v1 and CDP-v2."""

from __future__ import annotations

from .base import Action, Op, Schedule, StepActions, exists, micro_batch_check, micro_id


class CyclicDataParallel(Schedule):
    """Each frame is a batch split into N = D micro-batches; micro-batch i starts 2 time steps after
    micro-batch i-1, so every stage alternates one forward and one backward of distinct
    micro-batches (one time step each) and activation memory stays flat. A pipeline step is one
    training step: 2N time steps. With 0-based micro-batch m and stage h, batch b runs

    * forward of (b, m) on stage h at time 2Nb + 2m + h,
    * backward at time 2Nb + 2m + 2N-1-h,
    * stage h's update, after the backward of its last micro-batch, at time 2Nb + 4N-3-h,

    so batch b+1 starts before batch b has finished: its gradients use delayed weights.
    ``v1`` (CDP-v1, = PipeDream-2BW): θ_{t+1} = θ_t - γ/N Σ_i ∇f_i(θ_{t-1}).
    ``v2`` (CDP-v2): micro-batch i (1-based) uses θ_t on stages j >= N-i+1 and θ_{t-1} on the
    others, i.e. whatever each stage holds when the forward reaches it (the freshest weights).

    A forward whose backward comes after its stage's next update keeps only its input and is
    recomputed on the pre-update weights (``stale``) that the stage keeps as a second version.
    """

    version = 0

    @property
    def period(self) -> int:
        return 2 * self.stages

    def fresh(self, m: int, h: int) -> bool:
        """Whether the forward of micro-batch m reaches stage h after the stage's previous update."""
        return m + h >= self.stages - 1

    def _events(self, b: int, h: int, learn: bool) -> list[tuple[int, int, list[Action]]]:
        """(time, order, actions) of stage h for batch b."""
        n, last = self.stages, self.last
        stale_forward = self.version == 1
        events = []
        for m in range(n):
            u, fresh = micro_id(b, m, n), self.fresh(m, h)
            fwd = [Action(Op.INPUT, b, chunks=n)] if h == 0 and m == 0 else []
            if h > 0:
                fwd.append(Action(Op.RECV_ACT, u))
            if fresh or not learn:
                fwd.append(Action(Op.FORWARD, u, grad=learn, stale=stale_forward and learn))
            else:
                fwd += [Action(Op.STASH, u), Action(Op.FORWARD, u)]
            if h < last:
                fwd.append(Action(Op.SEND_ACT, u))
            else:
                fwd.append(Action(Op.OUTPUT, u, chunks=n))
                if learn:
                    fwd.append(Action(Op.LOSS, u, chunks=n))
            events.append((self.period * b + 2 * m + h, 0, fwd))
            if not learn:
                continue
            bwd = [] if h == last else [Action(Op.RECV_GRAD, u, u)]
            if not fresh:
                bwd.append(Action(Op.RECOMPUTE, u, stale=True))
            bwd.append(Action(Op.BACKWARD, u, u))
            if h > 0:
                bwd.append(Action(Op.SEND_GRAD, u))
            events.append((self.period * b + 2 * m + 2 * n - 1 - h, 0, bwd))
        if learn:
            events.append((self.period * b + 4 * n - 3 - h, 1, [Action(Op.UPDATE, b, stale=True)]))
        return events

    def actions(self, step: int, last_frame: int | None, learn: bool) -> StepActions:
        start, end = self.period * step, self.period * (step + 1)
        plan: StepActions = []
        for h in range(self.stages):
            events = [e for b in (step - 1, step) if exists(b, last_frame) for e in self._events(b, h, learn)]
            events = sorted((e for e in events if start <= e[0] < end), key=lambda e: e[:2])
            plan.append([a for _, _, acts in events for a in acts])
        return plan

    def output_frame(self, step: int) -> int:
        """The last micro-batch leaves the last stage at time 2Nb + 3N-3."""
        return step - (3 * self.stages - 3) // self.period

    def drain_steps(self) -> int:
        return 1  # the last batch's final update is at time 2Nb + 4N-3 < 2N(b+2)

    def message_slots(self) -> int:
        return 2 * self.period  # messages of two batches are in flight; a CUDA host may run ahead

    def check_input(self, sample_input_shape: tuple[int, ...]) -> None:
        micro_batch_check(sample_input_shape, self.stages, self.name)


class CDPv1(CyclicDataParallel):
    name = "cdp-v1"
    version = 1


class CDPv2(CyclicDataParallel):
    name = "cdp-v2"
    version = 2
