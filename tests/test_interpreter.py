"""pipeline_core.interpreter: what each schedule action does to a stage, over any ``Transport``."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

from pipeline_core.interpreter import Interpreter, messages_to
from pipeline_core.schedules import Action, Op, Sequential
from pipeline_core.stage import Stage


class DictTransport:
    """The smallest ``Transport``: a dict; what every runtime's transport must behave like."""

    def __init__(self) -> None:
        self.messages: dict[tuple[str, int, int], Tensor] = {}

    def send(self, kind: str, stage: int, frame: int, tensor: Tensor) -> None:
        self.messages[(kind, stage, frame)] = tensor.clone()

    def recv(self, kind: str, stage: int, frame: int) -> Tensor:
        return self.messages.pop((kind, stage, frame))

    def ready(self, kind: str, stage: int, frame: int) -> bool:
        return (kind, stage, frame) in self.messages


def mse(out: Tensor, target: Tensor | None) -> Tensor:
    return (out - target).pow(2).mean()


def stages() -> dict[int, Stage]:
    torch.manual_seed(0)
    parts = [nn.Sequential(nn.Linear(3, 4), nn.Tanh()), nn.Sequential(nn.Linear(4, 2))]
    return {
        h: Stage(h, part, torch.device("cpu"), lambda p: torch.optim.SGD(p, lr=0.1)) for h, part in enumerate(parts)
    }


def test_messages_to_lists_what_the_neighbours_send_in_sending_order():
    plan = Sequential(3).actions(0, None, learn=True)
    assert messages_to(plan, 1) == [("act", 0, 0), ("grad", 0, 2)]
    assert messages_to(plan, 0) == [("grad", 0, 1)]
    assert messages_to(plan, 2) == [("act", 0, 1)]


def test_one_exact_step_equals_plain_backprop():
    held, t = stages(), DictTransport()
    x, y = torch.rand(5, 3), torch.rand(5, 2)
    ref = nn.Sequential(*[m for s in stages().values() for m in s.module])
    interp = Interpreter(held, t, mse, last=1)
    t.send("input", 0, 0, x)
    t.send("target", 1, 0, y)
    plan = Sequential(2).actions(0, None, learn=True)
    for h in (0, 1, 0):  # stage 0 forwards, stage 1 forwards and backwards, stage 0 backwards
        while plan[h] and interp.is_ready(h, plan[h][0]):
            interp.run(h, plan[h].pop(0))
    assert not any(plan) and not t.messages
    loss = mse(ref(x), y)
    loss.backward()
    assert float(interp.record.losses[0]) == pytest.approx(loss.item())
    assert torch.allclose(interp.record.outputs[0], ref(x).detach())
    with torch.no_grad():
        for p in ref.parameters():
            p -= 0.1 * p.grad
    got = [p for s in held.values() for p in s.module.parameters()]
    assert all(torch.allclose(a, b) for a, b in zip(got, ref.parameters(), strict=True))


def test_a_receive_is_ready_only_once_its_message_is_there():
    t = DictTransport()
    interp = Interpreter(stages(), t, mse, last=1)
    action = Action(Op.RECV_ACT, 3)
    assert not interp.is_ready(1, action)
    t.send("act", 1, 3, torch.zeros(1))
    assert interp.is_ready(1, action)
    assert interp.is_ready(0, Action(Op.UPDATE, 0))  # only receives wait


def test_a_loss_without_loss_fn_is_refused():
    held = stages()
    interp = Interpreter(held, DictTransport(), None, last=1)
    held[1].forward(0, torch.rand(2, 4), grad=True)
    with pytest.raises(ValueError, match="no loss_fn"):
        interp.run(1, Action(Op.LOSS, 0))


def test_micro_batches_are_scattered_and_their_outputs_gathered():
    held, t = stages(), DictTransport()
    interp = Interpreter(held, t, mse, last=1)
    x = torch.rand(4, 3)
    t.send("input", 0, 0, x)
    interp.run(0, Action(Op.INPUT, 0, chunks=2))
    assert sorted(held[0].inputs) == [0, 1] and torch.equal(held[0].inputs[1], x[2:])
    for u in (0, 1):
        interp.run(0, Action(Op.FORWARD, u))
        interp.run(0, Action(Op.SEND_ACT, u))
        interp.run(1, Action(Op.RECV_ACT, u))
        interp.run(1, Action(Op.FORWARD, u))
        interp.run(1, Action(Op.OUTPUT, u, chunks=2))
    with torch.no_grad():
        want = held[1].module(held[0].module(x))
    assert torch.allclose(interp.record.outputs[0], want)
