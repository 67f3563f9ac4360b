"""The entry points of a learning step that the devices' own kernels serve (the CPU's loops compiled by Numba, numpy's
partition, a GPU's Triton kernels), each beside the reference tensor ops it replaces, and switching them: what
``bench.cpu_loops`` times both ways, ``bench.learning_step``'s tensor-op ways run, and ``bench.step_ops`` counts as a
GPU without its kernels would launch it."""

from __future__ import annotations

from models import flow_cleanup, order_statistics, variational, window_products

#: Each part: the module whose entry point the step calls, its name, and the reference tensor ops.
PARTS = {
    "solver": (variational, "variational_solve", variational.solve_reference),
    "window dots": (window_products, "_dots", window_products.dots_reference),
    "window mix": (window_products, "_mix", window_products.mix_reference),
    "window spread": (window_products, "_spread", window_products.spread_reference),
    "fill colours": (flow_cleanup, "_similarity", flow_cleanup.similarity_reference),
    "fill verified": (flow_cleanup, "_explains", flow_cleanup.explains_reference),
    "k-th smallest": (order_statistics, "by_partition", order_statistics.kth_smallest_reference),
    "median skipping NaN": (order_statistics, "nan_median_by_partition", order_statistics.nan_median_reference),
}
#: The entry points as shipped (the device's kernels where they take the tensors).
SHIPPED = {part: getattr(module, name) for part, (module, name, _) in PARTS.items()}


def use(kernels: bool) -> None:
    """Every entry point to the devices' kernels (as shipped) or to its reference tensor ops."""
    for part, (module, name, reference) in PARTS.items():
        setattr(module, name, SHIPPED[part] if kernels else reference)
