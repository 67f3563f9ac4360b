"""How the nets' own Triton kernels are compiled (``models.variational_triton``, ``models.window_products_triton``):
one set of options for every launch.

``enable_fp_fusion`` off: a kernel rounds every product on its own, as the CPU's tensor ops it is checked against do; a
fused multiply-add rounds once, so the two would part in the last bits, and the refinement's solver carries such bits
through its 50 half sweeps. Triton 3.9 fuses unless told (and warns that 3.10 will not): said here, the kernels compute
the same under either.
"""

from __future__ import annotations

OPTIONS: dict[str, bool] = {"enable_fp_fusion": False}
