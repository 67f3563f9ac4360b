"""Parareal neural networks (Lee, Lee & Park): a feed-forward network torn into parallel pieces.

Given ``f = post ∘ blocks ∘ pre`` with block-repetitive ``blocks`` split into N fine subnetworks
f_0 … f_{N-1}, interface pre-processors C_j that map the input x to the input space of f_j
(C_0 = pre), and cheap coarse networks g_j (same spaces as f_j), the parareal network is

    λ_0 = f_0(C_0(x)),   λ_j = f_j(C_j(x)) + g_j(λ_{j-1} - C_j(x)),   y = post(λ_{N-1}).

Every f_j(C_j(x)) depends on x only, so the fine subnetworks run at the same time on their own
devices; only the cheap coarse chain is sequential. If the network is linear and g_j = f_j, then
λ_j = f_j(λ_{j-1}) and the parareal network is the original one (Proposition 3.1).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import torch
from torch import Tensor, nn


def split_blocks(blocks: nn.Sequential, parts: int) -> list[nn.Sequential]:
    """Consecutive, as equal as possible groups of blocks: the fine subnetworks f_j."""
    if not 1 <= parts <= len(blocks):
        raise ValueError(f"cannot split {len(blocks)} blocks into {parts} fine subnetworks")
    layers, base, extra = list(blocks), *divmod(len(blocks), parts)
    out, start = [], 0
    for j in range(parts):
        count = base + (1 if j < extra else 0)
        out.append(nn.Sequential(*layers[start : start + count]))
        start += count
    return out


class Parareal(nn.Module):
    def __init__(
        self,
        pre: nn.Module,
        fine: Sequence[nn.Module],
        interfaces: Sequence[nn.Module],
        coarse: Sequence[nn.Module],
        post: nn.Module,
        devices: Sequence[str | torch.device] | None = None,
    ) -> None:
        """``fine``: f_0 … f_{N-1}; ``interfaces``: C_1 … C_{N-1} (C_0 is ``pre``); ``coarse``:
        g_1 … g_{N-1}. ``devices``: one per fine subnetwork (f_j and C_j live there); pre, the
        coarse chain and post live on the first."""
        super().__init__()
        n = len(fine)
        if n < 1 or len(interfaces) != n - 1 or len(coarse) != n - 1:
            raise ValueError(
                f"{n} fine subnetworks need {n - 1} interfaces C_1.. and {n - 1} coarse networks g_1.., "
                f"got {len(interfaces)} and {len(coarse)}"
            )
        self.devices = [torch.device(d) for d in (devices or ["cpu"] * n)]
        if len(self.devices) != n:
            raise ValueError(f"{n} fine subnetworks need {n} devices, got {len(self.devices)}")
        main = self.devices[0]
        self.pre, self.post = pre.to(main), post.to(main)
        self.fine = nn.ModuleList(f.to(d) for f, d in zip(fine, self.devices, strict=True))
        self.interfaces = nn.ModuleList(c.to(d) for c, d in zip(interfaces, self.devices[1:], strict=True))
        self.coarse = nn.ModuleList(g.to(main) for g in coarse)

    @classmethod
    def from_network(
        cls,
        pre: nn.Module,
        blocks: nn.Sequential,
        post: nn.Module,
        parts: int,
        interfaces: Sequence[nn.Module],
        coarse: Sequence[nn.Module],
        devices: Sequence[str | torch.device] | None = None,
    ) -> Parareal:
        """The parareal version of ``post ∘ blocks ∘ pre``: ``blocks`` split into ``parts``."""
        return cls(pre, split_blocks(blocks, parts), interfaces, coarse, post, devices)

    def _fine(self, j: int, x: Tensor, grad: bool) -> tuple[Tensor, Tensor]:
        """C_j(x) and f_j(C_j(x)) on device j (grad mode is per thread: carry the caller's)."""
        with torch.set_grad_enabled(grad):
            z = self.pre(x) if j == 0 else self.interfaces[j - 1](x.to(self.devices[j], non_blocking=True))
            return z, self.fine[j](z)

    def forward(self, x: Tensor) -> Tensor:
        n, grad, main = len(self.fine), torch.is_grad_enabled(), self.devices[0]
        if n == 1:
            results = [self._fine(0, x, grad)]
        else:  # the fine subnetworks at once: torch kernels release the GIL, CUDA launches are async
            with ThreadPoolExecutor(n, thread_name_prefix="parareal") as pool:
                results = list(pool.map(lambda j: self._fine(j, x, grad), range(n)))
        lam = results[0][1]
        for j in range(1, n):
            z, fz = (t.to(main, non_blocking=True) for t in results[j])
            lam = fz + self.coarse[j - 1](lam - z)
        return self.post(lam)
