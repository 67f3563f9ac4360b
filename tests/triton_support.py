"""What the tests of the GPU's own Triton kernels share: the kernels' module run in Triton's interpreter (on CPU
tensors), and the kernels compiled for a Hopper GPU without one."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest


def interpreted(module: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """``module`` imported afresh with ``TRITON_INTERPRET=1`` (its kernels then run on CPU tensors, in Python), and
    afresh again afterwards without it (for a fixture to yield from)."""
    kernels = importlib.import_module(module)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    yield importlib.reload(kernels)
    monkeypatch.delenv("TRITON_INTERPRET")
    importlib.reload(kernels)


def compile_for_hopper(kernel, ints: set[str], floats: set[str], constants: dict[str, int]) -> dict[str, Any]:
    """``kernel`` through Triton's whole compiler for sm_90 (H100, H200), ptxas included, with the options every
    launch of it takes (``models.triton_launch``): its assembly by stage (``"ptx"``, ``"cubin"``, ...). Arguments named
    in ``ints`` are int32, in ``floats`` float32, in ``constants`` compile-time constants, the others float32
    pointers."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from models.triton_launch import OPTIONS

    def kind(name: str) -> str:
        return "constexpr" if name in constants else "i32" if name in ints else "fp32" if name in floats else "*fp32"

    signature = {name: kind(name) for name in kernel.arg_names}
    constexprs = {(kernel.arg_names.index(name),): value for name, value in constants.items()}
    return triton.compile(ASTSource(fn=kernel, signature=signature, constexprs=constexprs),
                          target=GPUTarget("cuda", 90, 32), options=OPTIONS).asm  # fmt: skip
