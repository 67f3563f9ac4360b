"""One stage: a slice of the network, its device, its optimizer, and the graphs it keeps.

A stage only computes; it never talks to other stages. The runtime feeds it inputs and gradients
and forwards what it produces (see ``runtime.py``), so the same stage works in threads, on CUDA
streams, inside a CUDA graph, or in its own process.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.func import functional_call

from .microbatch import Gather, concat, total
from .partition import only_shown

LossFn = Callable[[Tensor, Tensor | None], Tensor]
#: ``(output, grad, frames_apart) -> grad``: a stale output gradient (computed ``frames_apart`` frames before the
#: output it is pushed through) brought into line with that output. See ``Stage.backward``.
GradAlign = Callable[[Tensor, Tensor, int], Tensor]
OptimizerFactory = Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer]


def learned_part(module: nn.Sequential, shown: int) -> nn.Sequential:
    """What the samples learned from pass of ``module`` in a batch whose first ``shown`` are only shown: its layers but
    those only shown samples pass (``partition.only_shown``), the same layer objects under the same names (their
    weights are shared); ``module`` itself where none is only shown or every layer is passed."""
    if not shown or not any(only_shown(m) for m in module):
        return module
    return nn.Sequential(OrderedDict((n, m) for n, m in module.named_children() if not only_shown(m)))


def forward_samples(
    run: Callable[[Tensor], Tensor], run_learned: Callable[[Tensor], Tensor], x: Tensor, leaf: Tensor, shown: int
) -> Tensor:
    """A batch whose first ``shown`` samples are only shown: those go through ``run`` in inference mode (``x``: no
    graph, nor any of autograd's bookkeeping, which was 15 % of a flow net's forward at 128x96 on a CPU), the rest
    through ``run_learned`` as ``leaf`` (in the caller's grad mode); none shown, the whole batch through ``run``."""
    if not shown:
        return run(leaf)
    with torch.inference_mode():
        seen = run(x[:shown])
    return torch.cat([seen, run_learned(leaf[shown:])])


def _on_weights(module: nn.Module, weights: dict[str, Tensor]) -> Callable[[Tensor], Tensor]:
    """``module`` run on ``weights`` (parameters of the stage's whole module by name: those ``module`` has)."""
    own = {name: weights[name] for name, _ in module.named_parameters()}
    return lambda inp: functional_call(module, own, (inp,))


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
        align_stale_grad: GradAlign | None = None,
        compile_backend: str | None = None,
        shown: int = 0,
    ) -> None:
        """``compile_backend``: run the module through ``torch.compile`` with this backend (``inductor`` fuses the
        stage's forward and backward into a few kernels: on a GPU a small net's step is launches, not arithmetic).
        Static shapes: a stage sees one frame size until the pipeline is rebuilt for another. ``module`` stays the
        plain module: its state dict and the stale forwards use it. ``shown``: how many leading samples of every
        input are only shown, forwarded without a graph (``forward``); the others go by the layers only shown samples
        pass (``learned``)."""
        self.index = index
        self.shown = shown
        self.align_stale_grad = align_stale_grad
        self.device = device
        self.module = module.to(device)
        self.learned = learned_part(self.module, shown)
        self.run, self.run_learned = self.module, self.learned
        if compile_backend is not None:
            self.run = torch.compile(self.module, backend=compile_backend, dynamic=False)
            self.run_learned = self.run
            if self.learned is not self.module:
                self.run_learned = torch.compile(self.learned, backend=compile_backend, dynamic=False)
        params = [p for p in self.module.parameters() if p.requires_grad]
        self.optimizer = optimizer(params) if (optimizer is not None and params) else None
        self._reading_layers = [m for m in self.module.modules() if callable(getattr(m, "readings", None))]
        # Per-frame state in flight, filled and drained by the runtime's actions.
        self.inputs: dict[int, Tensor] = {}
        self.forwarded: dict[int, Forwarded] = {}
        self.losses: dict[int, Tensor] = {}
        self.received_grads: dict[int, Tensor] = {}
        self.input_grads: dict[int, Tensor] = {}
        # Schedules that recompute, split batches or keep two weight versions (stash, GPipe, CDP).
        self.stash: dict[int, Tensor] = {}  # inputs kept for a RECOMPUTE
        self.targets: dict[int, Tensor] = {}  # targets of micro-batches, by micro-batch id
        self.gathered_outputs = Gather(concat)  # last stage: micro-batch outputs of a batch
        self.gathered_losses = Gather(total)  # last stage: micro-batch losses of a batch
        self.previous: dict[str, Tensor] | None = None  # the weights before the last update

    def forward(self, frame: int, x: Tensor, grad: bool, stale: bool = False) -> Tensor:
        """Forward ``frame``; with ``grad`` the graph is kept for a later :meth:`backward`, but for the ``shown``
        leading samples, which go forward without one (their backward would only push zeros: the loss does not read
        them; ``forward_samples``). With ``stale`` it runs on the weights from before the last update (when the
        stage keeps them)."""
        run, run_learned = self.run, self.run_learned
        if stale and self.previous is not None:
            run, run_learned = (_on_weights(m, self.previous) for m in (self.module, self.learned))
        leaf = x.detach().requires_grad_(self.index > 0) if grad else x
        with torch.set_grad_enabled(grad and torch.is_grad_enabled()):
            out = forward_samples(run, run_learned, x, leaf, self.shown)
        self.forwarded[frame] = Forwarded(leaf, out, grad)
        return out

    def infer(self, x: Tensor) -> Tensor:
        """``x`` forwarded without a graph as a step would (``forward_samples``, the plain modules)."""
        with torch.no_grad():
            return forward_samples(self.module, self.learned, x, x, self.shown)

    def readings(self) -> dict[str, Tensor]:
        """What the stage's layers read of the samples they last forwarded, by name: a layer that reads something of
        its input that its output does not carry, for the pipeline's caller, says so in a method ``readings`` (name ->
        a small tensor it keeps). As the layers keep them, on the stage's device: nothing is read back to the host."""
        return {name: t for layer in self._reading_layers for name, t in layer.readings().items()}

    def keep_input(self, frame: int) -> None:
        """Stash a private copy of the input of ``frame`` (received buffers get reused)."""
        self.stash[frame] = self.inputs[frame].clone()

    def output(self, frame: int) -> Tensor:
        return self.forwarded[frame].output.detach()

    def passed_on(self, frame: int) -> None:
        """The output of ``frame`` was sent or published: a forward-only result is no longer needed
        (frees checkpointed activations at once rather than at the end of the step)."""
        if not self.forwarded[frame].keep:
            del self.forwarded[frame]

    def loss(self, frame: int, loss_fn: LossFn, target: Tensor | None, scale: float = 1.0) -> Tensor:
        """The loss of ``frame``, times ``scale`` (1/chunks for a micro-batch of a batch)."""
        loss = loss_fn(self.forwarded[frame].output, target)
        if scale != 1.0:
            loss = loss * scale
        self.losses[frame] = loss
        return loss.detach()

    def backward(self, frame: int, grad_frame: int, grad: Tensor | None) -> None:
        """Backprop through the graph of ``frame``: the loss of ``grad_frame`` (last stage) or the
        received output gradient ``grad``. The graph is released afterwards.

        A gradient of another frame (PARTIME: ``grad_frame`` < ``frame``) first goes through
        ``align_stale_grad`` when the stage has one. Why: PARTIME assumes consecutive inputs are alike, but
        in video the content moves: a gradient about where an object *was* pushed through the graph of where
        it *is* teaches the wrong pixels. The engine knows nothing of video; the model's owner says how to
        align (``models.stale_gradient``)."""
        fwd = self.forwarded.pop(frame)
        if grad is not None and grad_frame != frame and self.align_stale_grad is not None:
            with torch.no_grad():
                grad = self.align_stale_grad(fwd.output.detach(), grad, frame - grad_frame)
        if not fwd.output.requires_grad:  # stage 0 without parameters: nothing to learn or send
            self.losses.pop(grad_frame, None)
        elif grad is None:
            self.losses.pop(grad_frame).backward()
        else:
            torch.autograd.backward(fwd.output, grad)
        if self.index > 0:
            self.input_grads[frame] = fwd.input.grad

    def update(self, keep_previous: bool = False) -> None:
        """Optimizer step on every gradient accumulated since the last one, including those computed
        on the previous weights. ``keep_previous``: first copy the weights, for stale forwards.
        Gradients are zeroed in place so CUDA graphs see static tensors."""
        if self.optimizer is None:
            return
        named = list(self.module.named_parameters())
        if self.previous is not None:
            for name, param in named:
                old = self.previous[name]
                if old.grad is not None:
                    param.grad = old.grad if param.grad is None else param.grad.add_(old.grad)
                    old.grad = None
        if keep_previous:
            self.previous = {name: p.detach().clone().requires_grad_(p.requires_grad) for name, p in named}
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=False)

    def set_lr(self, lr: float) -> None:
        """The stage's rate; a parameter group with an ``lr_scale`` learns at that multiple of it (the flow nets'
        scalar priors learn faster than their convolutions: ``models.online.flow_optimizer``)."""
        if self.optimizer is not None:
            for group in self.optimizer.param_groups:
                group["lr"] = lr * group.get("lr_scale", 1.0)

    def set_group_options(self, holding: str, options: Mapping[str, float]) -> None:
        """``options`` on the optimizer's parameter groups that hold the option ``holding`` (a learner tunes one kind
        of group as the data asks: the flow nets' priors, ``models.feeds.KnownMotionFeed``); an ``lr_scale`` among
        them moves the group's rate with it, from the stage's rate."""
        if self.optimizer is None:
            return
        for group in self.optimizer.param_groups:
            if holding in group:
                base = group["lr"] / group.get("lr_scale", 1.0)
                group.update(options)
                group["lr"] = base * group.get("lr_scale", 1.0)

    def end_step(self) -> None:
        """Drop forward-only results: they were needed only within the step."""
        for frame in [f for f, fwd in self.forwarded.items() if not fwd.keep]:
            del self.forwarded[frame]

    def reset(self) -> None:
        """Forget everything in flight (after a flush or a weight load)."""
        states = (self.inputs, self.forwarded, self.losses, self.received_grads, self.input_grads, self.stash)
        for state in (*states, self.targets, self.gathered_outputs, self.gathered_losses):
            state.clear()
        self.previous = None

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
