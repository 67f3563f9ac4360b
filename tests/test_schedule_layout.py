"""pipeline_core.schedules.layout: every schedule printed and checked without running it; broken
schedules refused with a message that says what is wrong."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pipeline_core import Pipeline, ScheduleError
from pipeline_core.schedules import (
    SCHEDULES,
    Action,
    GPipe,
    Hybrid,
    Op,
    Partime,
    Schedule,
    Sequential,
    lay_out,
    validate,
)


def built_ins(depth: int) -> list[Schedule]:
    variants = [GPipe(depth, chunks=3, checkpoint=c) for c in ("never", "except_last", "always")]
    return [make(depth) for make in SCHEDULES.values()] + [Hybrid(depth, hybrid_after=5), *variants]


@pytest.mark.parametrize("depth", [1, 2, 3, 4])
@pytest.mark.parametrize("learn", [True, False])
def test_every_built_in_schedule_is_valid(depth, learn):
    for schedule in built_ins(depth):
        layout = validate(schedule, learn=learn)
        assert len(layout.steps) == layout.frames + schedule.drain_steps()


def test_a_layout_renders_as_a_table_of_steps_and_stages():
    text = lay_out("partime", 3, frames=4).render()
    lines = text.splitlines()
    assert lines[0] == "partime: 3 stages, 4 frames, learn=True"
    assert [cell.strip() for cell in lines[1].split("|")] == ["step", "stage 0", "stage 1", "stage 2"]
    # Step 3 of PARTIME on 3 stages: stage 1 backpropagates the gradient of frame 0 through frame 2.
    step3 = [cell.strip() for cell in lines[3 + 3].split("|")]
    assert step3 == ["3", "in3 f3 sa3", "ra2 F2 sa2 rg0 B2<0 sg2 U", "ra1 F1 out1 L1 B1 sg1 U"]
    assert len(lines) == 3 + 4 + 2 + 1  # title, header, rule; frames and drain steps; legend


def test_a_schedule_by_name_needs_its_stages():
    with pytest.raises(ValueError, match="needs a number of stages"):
        lay_out("partime")
    assert lay_out("gpipe", 2).stages == 2


class Forgetful(Partime):
    """Stage 0 never receives its gradients: it backpropagates labels it does not hold."""

    name = "forgetful"

    def actions(self, step, last_frame, learn):
        plan = super().actions(step, last_frame, learn)
        plan[0] = [a for a in plan[0] if a.op is not Op.RECV_GRAD]
        return plan


class WaitsForAFuture(Sequential):
    """Stage 1 waits for an activation of a frame not yet sent: a deadlock."""

    name = "waits"

    def actions(self, step, last_frame, learn):
        plan = super().actions(step, last_frame, learn)
        plan[1] = [Action(Op.RECV_ACT, a.frame + 1) if a.op is Op.RECV_ACT else a for a in plan[1]]
        return plan


class SkipsOne(Sequential):
    """Stage 0 skips the backward (and the update) of frame 5."""

    name = "skips"

    def actions(self, step, last_frame, learn):
        plan = super().actions(step, last_frame, learn)
        if step == 5:
            plan[0] = [a for a in plan[0] if a.op not in (Op.RECV_GRAD, Op.BACKWARD, Op.UPDATE)]
            plan[0] = [Action(Op.FORWARD, 5) if a.op is Op.FORWARD else a for a in plan[0]]
        return plan


class SameStep(Sequential):
    """Sequential receives within a step what was sent in it; claiming otherwise is refused."""

    name = "same-step"
    intra_step_messages = False


class Unread(Partime):
    """Stage 1 sends gradients that stage 0 never takes (stage 0 never learns)."""

    name = "unread"

    def actions(self, step, last_frame, learn):
        plan = super().actions(step, last_frame, learn)
        plan[0] = [a for a in plan[0] if a.op not in (Op.RECV_GRAD, Op.BACKWARD, Op.UPDATE)]
        plan[0] = [Action(Op.FORWARD, a.frame) if a.op is Op.FORWARD else a for a in plan[0]]
        return plan


@pytest.mark.parametrize(
    "schedule, message",
    [
        (Forgetful(3), r"stage 0 at backward\(4<-2\) needs the gradient labelled 2, which it does not hold"),
        (WaitsForAFuture(2), r"step 0: deadlock, waiting for messages never sent: .*stage 1 at recv_act\(1\)"),
        (SkipsOne(2), r"stage 0 skips the backward of \[5\] after learning from 0"),
        (SameStep(2), r"stage 1 at recv_act\(0\) receives what was sent in the same step"),
        (Unread(2), r"stage 0 never learns"),
    ],
)
def test_broken_schedules_are_refused_with_the_reason(schedule, message):
    with pytest.raises(ScheduleError, match=message):
        validate(schedule)


def test_messages_sent_to_nobody_are_named():
    with pytest.raises(ScheduleError, match=r"stage 1 sends grad of 0 \(step 1\) to stage 0, which never receives it"):
        validate(Unread(2))


def test_pipeline_refuses_a_broken_schedule_at_construction():
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 4))
    with pytest.raises(ScheduleError, match="cannot run"):
        Pipeline(model, torch.rand(2, 4), balance=[2, 1], schedule=Forgetful(2), loss_fn=lambda o, t: o.sum())
