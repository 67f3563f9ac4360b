"""Split an ``nn.Sequential`` into contiguous stages and place them on devices."""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Callable

import torch
from torch import nn


def check_sequential(model: object) -> nn.Sequential:
    if not isinstance(model, nn.Sequential):
        raise TypeError(
            f"Pipeline needs an nn.Sequential, got {type(model).__name__}: wrap your layers in "
            "nn.Sequential(...) so they can be split into stages (skip connections must pass "
            "through the layers as tensors)."
        )
    if len(model) == 0:
        raise ValueError("the model has no layers")
    return model


def check_balance(balance: list[int], layers: int) -> list[int]:
    balance = [int(b) for b in balance]
    if not balance or any(b < 1 for b in balance):
        raise ValueError(f"balance must be positive layer counts, got {balance}")
    if sum(balance) != layers:
        raise ValueError(f"balance {balance} sums to {sum(balance)}, but the model has {layers} layers")
    return balance


def only_shown(layer: nn.Module) -> bool:
    """True when only shown samples pass ``layer`` (attribute ``only_shown``; a ``Stage``'s ``shown``): the samples
    learned from go by it, and their loss is read without it. For a last touch to what is shown that has nothing to
    learn and passes its gradient straight through, whose forward learning would pay for nothing. A stage's output
    must have one shape with it and without it. Where no sample is only shown, every sample passes it."""
    return bool(getattr(layer, "only_shown", False))


def keeps_with_next(layer: nn.Module) -> bool:
    """True when ``layer`` asks not to end a stage (attribute ``keep_with_next``): automatic
    balancing then never cuts after it. A model sets it where a stage boundary is known to hurt
    learning (e.g. where PARTIME's stale gradients diverge); an explicit ``balance`` may still cut."""
    return bool(getattr(layer, "keep_with_next", False))


def equal_balance(layers: int, stages: int) -> list[int]:
    """Layer counts as equal as possible (used when nothing better is known)."""
    if stages > layers:
        raise ValueError(f"{stages} stages requested, but the model has only {layers} layers")
    base, extra = divmod(layers, stages)
    return [base + (1 if i < extra else 0) for i in range(stages)]


def resolve_devices(devices: list[str | torch.device] | None) -> list[torch.device]:
    """Default: every CUDA GPU, else the CPU. Unknown devices are refused up front."""
    if devices is None:
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        return [torch.device("cuda", i) for i in range(count)] or [torch.device("cpu")]
    if not devices:
        raise ValueError("devices is empty")
    resolved = []
    for d in devices:
        try:
            dev = torch.device(d)
        except (RuntimeError, TypeError) as exc:
            raise ValueError(f"invalid device {d!r}: {exc}") from None
        if dev.type == "cuda":
            count = torch.cuda.device_count() if torch.cuda.is_available() else 0
            index = 0 if dev.index is None else dev.index
            if index >= count:
                raise ValueError(f"device {d!r} does not exist: this machine has {count} CUDA device(s)")
            dev = torch.device("cuda", index)
        elif dev.type != "cpu":
            raise ValueError(f"device {d!r} is not supported: use 'cpu' or 'cuda:N'")
        resolved.append(dev)
    return resolved


def stage_devices(devices: list[torch.device], stages: int) -> list[torch.device]:
    """Neighbouring stages share a device when there are fewer devices than stages."""
    return [devices[(i * len(devices)) // stages] for i in range(stages)]


def copy_layer(layer: nn.Module) -> nn.Module:
    """A deep copy of ``layer`` whose parameters keep the attributes the model set on them (torch's
    ``Parameter.__deepcopy__`` drops them; pickling, as the process runtimes send a stage, keeps them): an optimizer
    factory may read such tags to treat some parameters apart."""
    copied = copy.deepcopy(layer)
    for original, new in zip(layer.parameters(), copied.parameters(), strict=True):
        new.__dict__.update(copy.deepcopy(original.__dict__))
    return copied


def split(model: nn.Sequential, balance: list[int]) -> list[nn.Sequential]:
    """Deep copies of consecutive layer groups (``copy_layer``): the user's model is never mutated."""
    named = list(model.named_children())
    parts, start = [], 0
    for count in balance:
        parts.append(nn.Sequential(OrderedDict((n, copy_layer(m)) for n, m in named[start : start + count])))
        start += count
    return parts


TensorMeta = tuple[tuple[int, ...], torch.dtype]


def trace(
    parts: list[Callable[[torch.Tensor], torch.Tensor]], sample_input: torch.Tensor, devices: list[torch.device]
) -> list[TensorMeta]:
    """Run the sample through every part: shape errors surface now, clearly, and each stage's output
    shape and dtype are known before any frame (for buffers allocated ahead of time)."""
    x, metas = sample_input, []
    with torch.no_grad():
        for i, (part, device) in enumerate(zip(parts, devices, strict=True)):
            try:
                x = part(x.to(device))
            except Exception as exc:
                raise ValueError(f"stage {i} cannot run on sample_input: {exc}") from exc
            metas.append((tuple(x.shape), x.dtype))
    return metas


def join(parts: list[nn.Module]) -> nn.Sequential:
    """The inverse of :func:`split`, on CPU, with the layer names of the original model."""
    layers: OrderedDict[str, nn.Module] = OrderedDict()
    for part in parts:
        for name, module in part.named_children():
            layers[name] = copy_layer(module).cpu()
    return nn.Sequential(layers)
