import torch

from models.deep_supervision import supervise


def test_supervise_adds_the_weighted_loss_to_the_objective():
    torch.manual_seed(0)
    w = torch.randn(3, requires_grad=True)
    x = torch.randn(5, 3)
    hidden = x @ w
    out = supervise(hidden, lambda: hidden.square().sum(), 0.3)
    assert torch.equal(out, hidden)
    out.sin().sum().backward()
    attached = w.grad.clone()

    w.grad = None
    hidden = x @ w
    (hidden.sin().sum() + 0.3 * hidden.square().sum()).backward()
    assert torch.allclose(attached, w.grad)
    assert not torch.allclose(attached, torch.autograd.grad((x @ w).sin().sum(), w)[0])


def test_supervise_computes_nothing_when_no_backward_can_follow():
    calls = []

    def loss() -> torch.Tensor:
        calls.append(1)
        return torch.zeros(())

    leaf = torch.ones(2, requires_grad=True)
    with torch.no_grad():
        supervise(leaf * 2, loss, 1.0)
    supervise(torch.ones(2), loss, 1.0)  # not in a graph
    supervise(leaf * 2, loss, 0.0)
    assert calls == []
