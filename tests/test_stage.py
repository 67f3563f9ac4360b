"""pipeline_core.stage: one stage's forward, backward and update, and the state it keeps between them."""

from __future__ import annotations

import torch
from torch import nn

from pipeline_core.stage import Stage

CPU = torch.device("cpu")


def sgd(params):
    return torch.optim.SGD(params, lr=0.1)


def stage(index: int = 1) -> Stage:
    torch.manual_seed(0)
    return Stage(index, nn.Sequential(nn.Linear(3, 2)), CPU, sgd)


def test_backward_of_a_received_gradient_matches_autograd_and_gives_the_input_gradient():
    s, x, grad = stage(), torch.rand(4, 3), torch.rand(4, 2)
    s.forward(0, x, grad=True)
    s.backward(0, 0, grad)
    leaf = x.clone().requires_grad_(True)
    ref = stage().module
    torch.autograd.backward(ref(leaf), grad)
    assert torch.allclose(s.module[0].weight.grad, ref[0].weight.grad)
    assert torch.allclose(s.input_grads[0], leaf.grad)
    assert 0 not in s.forwarded  # the graph is released


def test_the_first_stage_sends_no_input_gradient():
    s = stage(index=0)
    s.forward(0, torch.rand(4, 3), grad=True)
    s.backward(0, 0, torch.ones(4, 2))
    assert s.input_grads == {}


def test_a_forward_without_graph_is_dropped_once_passed_on_or_at_the_end_of_the_step():
    s = stage()
    s.forward(0, torch.rand(4, 3), grad=False)
    s.forward(1, torch.rand(4, 3), grad=False)
    s.forward(2, torch.rand(4, 3), grad=True)
    s.passed_on(0)
    assert set(s.forwarded) == {1, 2}
    s.end_step()
    assert set(s.forwarded) == {2}


def test_loss_seeds_the_backward_of_the_last_stage_and_update_applies_it():
    s, x = stage(), torch.rand(4, 3)
    before = s.module[0].weight.detach().clone()
    s.forward(0, x, grad=True)
    loss = s.loss(0, lambda out, _t: out.pow(2).sum(), None)
    s.backward(0, 0, None)
    s.update()
    assert float(loss) > 0
    assert not torch.equal(s.module[0].weight, before)
    assert torch.count_nonzero(s.module[0].weight.grad) == 0  # zeroed in place for the next step


def test_a_stale_forward_runs_on_the_weights_from_before_the_last_update():
    s, x = stage(), torch.rand(4, 3)
    old = s.module(x).detach()
    s.forward(0, x, grad=True)
    s.loss(0, lambda out, _t: out.sum(), None)
    s.backward(0, 0, None)
    s.update(keep_previous=True)
    assert torch.allclose(s.forward(1, x, grad=False, stale=True), old)
    assert not torch.allclose(s.forward(2, x, grad=False), old)


def test_set_lr_and_reset():
    s = stage()
    s.set_lr(0.5)
    assert s.optimizer.param_groups[0]["lr"] == 0.5
    s.inputs[3] = torch.zeros(1)
    s.forward(3, torch.rand(1, 3), grad=True)
    s.reset()
    assert not s.inputs and not s.forwarded


def test_group_options_reach_only_the_groups_that_hold_the_option():
    def two_groups(params):
        weight, bias = params
        return torch.optim.SGD([{"params": [weight]}, {"params": [bias], "lr_scale": 10.0, "anchor": 1.0}], lr=0.1)

    s = Stage(1, nn.Sequential(nn.Linear(3, 2)), CPU, two_groups)
    s.set_lr(0.1)
    s.set_group_options("anchor", {"anchor": 0.0, "lr_scale": 30.0})
    plain, tagged = s.optimizer.param_groups
    assert "anchor" not in plain and plain["lr"] == 0.1
    assert tagged["anchor"] == 0.0 and abs(tagged["lr"] - 3.0) < 1e-12  # the stage's rate times the new scale
    s.set_lr(0.2)
    assert abs(tagged["lr"] - 6.0) < 1e-12


def test_state_dict_is_a_snapshot():
    s = stage()
    state = s.state_dict()
    with torch.no_grad():
        s.module[0].weight.add_(1.0)
    assert not torch.equal(state["module"]["0.weight"], s.module[0].weight)
    s.load_state_dict(state)
    assert torch.equal(state["module"]["0.weight"], s.module[0].weight)
