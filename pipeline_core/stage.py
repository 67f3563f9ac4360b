"""One stage: a slice of the network, its device, its optimizer, and the graphs it keeps.

A stage only computes; it never talks to other stages. The runtime feeds it inputs and gradients
and forwards what it produces (see ``runtime.py``), so the same stage works in threads, on CUDA
streams, inside a CUDA graph, or in its own process.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

LossFn = Callable[[Tensor, Tensor | None], Tensor]
OptimizerFactory = Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer]


@dataclass
class Forwarded:
    """What a forward left behind: the input leaf (for the input gradient) and the output."""

    input: Tensor
    output: Tensor
    keep: bool  # a backward will consume it; otherwise it is dropped at the end of the step


class Stage:
    def __init__(
        self,
        index: int,
        module: nn.Sequential,
        device: torch.device,
        optimizer: OptimizerFactory | None,
    ) -> None:
        self.index = index
        self.device = device
        self.module = module.to(device)
        params = [p for p in self.module.parameters() if p.requires_grad]
        self.optimizer = optimizer(params) if (optimizer is not None and params) else None
        # Per-frame state in flight, filled and drained by the runtime's actions.
        self.inputs: dict[int, Tensor] = {}
        self.forwarded: dict[int, Forwarded] = {}
        self.losses: dict[int, Tensor] = {}
        self.received_grads: dict[int, Tensor] = {}
        self.input_grads: dict[int, Tensor] = {}

    def forward(self, frame: int, x: Tensor, grad: bool) -> Tensor:
        """Forward ``frame``; with ``grad`` the graph is kept for a later :meth:`backward`."""
        if grad:
            leaf = x.detach().requires_grad_(self.index > 0)
            out = self.module(leaf)
        else:
            with torch.no_grad():
                leaf = x
                out = self.module(x)
        self.forwarded[frame] = Forwarded(leaf, out, grad)
        return out

    def output(self, frame: int) -> Tensor:
        return self.forwarded[frame].output.detach()

    def loss(self, frame: int, loss_fn: LossFn, target: Tensor | None) -> Tensor:
        loss = loss_fn(self.forwarded[frame].output, target)
        self.losses[frame] = loss
        return loss.detach()

    def backward(self, frame: int, grad_frame: int, grad: Tensor | None) -> None:
        """Backprop through the graph of ``frame``: the loss of ``grad_frame`` (last stage) or the
        received output gradient ``grad``. The graph is released afterwards."""
        fwd = self.forwarded.pop(frame)
        if not fwd.output.requires_grad:  # stage 0 without parameters: nothing to learn or send
            self.losses.pop(grad_frame, None)
        elif grad is None:
            self.losses.pop(grad_frame).backward()
        else:
            torch.autograd.backward(fwd.output, grad)
        if self.index > 0:
            self.input_grads[frame] = fwd.input.grad

    def update(self) -> None:
        """Optimizer step; gradients are zeroed in place so CUDA graphs see static tensors."""
        if self.optimizer is not None:
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=False)

    def set_lr(self, lr: float) -> None:
        if self.optimizer is not None:
            for group in self.optimizer.param_groups:
                group["lr"] = lr

    def end_step(self) -> None:
        """Drop forward-only results: they were needed only within the step."""
        for frame in [f for f, fwd in self.forwarded.items() if not fwd.keep]:
            del self.forwarded[frame]

    def reset(self) -> None:
        """Forget everything in flight (after a flush or a weight load)."""
        for state in (self.inputs, self.forwarded, self.losses, self.received_grads, self.input_grads):
            state.clear()

    def state_dict(self) -> dict:
        """A snapshot: PyTorch's state dicts alias live tensors that the next update changes."""
        return copy.deepcopy(
            {
                "module": self.module.state_dict(),
                "optimizer": self.optimizer.state_dict() if self.optimizer is not None else None,
            }
        )

    def load_state_dict(self, state: dict) -> None:
        self.module.load_state_dict(state["module"])
        if self.optimizer is not None and state.get("optimizer") is not None:
            self.optimizer.load_state_dict(state["optimizer"])
        self.reset()
