"""A learning step never reads the device from the host, checked on CPU for every flow net.

Why on CPU: a CUDA graph cannot capture a step that reads a tensor on the host (``.item()``, ``float(t)``,
``if t:``) or makes a shape from values (``nonzero``, boolean indexing, ``unique``), and an eager step that does
stalls the GPU every time. CI has no GPU, so the ops themselves are watched: a ``TorchDispatchMode`` records every
aten op of one whole step (forward, loss, backward, optimizer) and the test fails on any that needs the host.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from models import order_statistics
from models.flow_loss import MAX_FLOW_PX, guarded_flow_loss, online_loss
from models.flow_nets import FLOW_NETS, build_flow_net
from models.online import online_pipeline
from pipeline_core.partition import keeps_with_next

#: Ops whose result the host must wait for (a number, a bool) or whose output shape depends on values.
HOST_READS = {
    "_local_scalar_dense",  # .item(), float(t), int(t), bool(t)
    "is_nonzero",  # if t:
    "equal",
    "allclose",
    "nonzero",
    "masked_select",
    "_unique",
    "_unique2",
    "unique_dim",
    "unique_consecutive",
    "repeat_interleave",
    "lift_fresh",  # torch.tensor(data) inside the step: an upload from the host on a GPU
    "lift_fresh_copy",
}


class HostReads(TorchDispatchMode):
    """Records the name of every op of ``HOST_READS``, and boolean-mask indexing, run while active."""

    def __init__(self, seen: list[str]) -> None:
        super().__init__()
        self.seen = seen

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name in HOST_READS or (name in ("index", "index_put", "index_put_") and _bool_index(args)):
            self.seen.append(str(func))
        return func(*args, **(kwargs or {}))


def _bool_index(args: tuple) -> bool:
    indices = args[1] if len(args) > 1 else []
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices or [])


def recorded_step(pipe, x: torch.Tensor) -> list[str]:
    """The host reads of one ``pipe.step``, in the calling thread and in every stage thread (modes are per thread)."""
    seen: list[str] = []
    runtime = pipe.runtime
    run_stage = runtime._run_stage_guarded

    def watched(h, actions):
        with HostReads(seen):
            return run_stage(h, actions)

    runtime._run_stage_guarded = watched
    try:
        with HostReads(seen):
            pipe.step(x, target=x)
    finally:
        runtime._run_stage_guarded = run_stage
    return seen


def coarse_then_full(net) -> list[int]:
    first_full = next(i for i, layer in enumerate(net) if keeps_with_next(layer))
    return [first_full, len(net) - first_full]


@pytest.fixture
def the_gpus_order_statistics(monkeypatch: pytest.MonkeyPatch) -> None:
    """The picture's order statistics the GPU's way (sorting) on the CPU too: the CPU's own way goes through numpy,
    in a CPU's memory, which no GPU step ever runs (``models.order_statistics`` picks by the tensor's device)."""
    monkeypatch.setattr(order_statistics, "by_partition", order_statistics.by_sorting)
    monkeypatch.setattr(order_statistics, "nan_median_by_partition", order_statistics.nan_median_by_sorting)


@pytest.mark.parametrize("stages", [1, 2])
@pytest.mark.parametrize("name", sorted(FLOW_NETS))
def test_a_learning_step_reads_nothing_on_the_host(name, stages, one_intra_op_thread, the_gpus_order_statistics):
    torch.manual_seed(0)
    net = build_flow_net(name, init="scratch")
    x = torch.rand(1, 6, 32, 48)
    layers = coarse_then_full(net) if stages == 2 else None
    with online_pipeline(net, x, stages, layers=layers) as pipe:
        for _ in range(4):  # the pipeline fills; every stage then forwards, backpropagates and updates each step
            pipe.step(x, target=x)
        assert recorded_step(pipe, x) == []


def test_the_watch_sees_a_host_read(one_intra_op_thread):
    """The check can fail: a loss that decides on the host is caught."""

    def deciding_loss(flow, frames):
        return online_loss(flow, frames) if float(flow.detach().abs().max()) < MAX_FLOW_PX else flow.sum()

    x = torch.rand(1, 6, 32, 48)
    with online_pipeline(build_flow_net("fast", init="scratch"), x, 1, loss_fn=deciding_loss) as pipe:
        pipe.step(x, target=x)
        assert any("_local_scalar_dense" in op for op in recorded_step(pipe, x))
    seen: list[str] = []
    with HostReads(seen):
        t = torch.arange(4.0)
        t[t > 1] = 0.0
    assert any("index_put" in op for op in seen)


def test_the_guarded_loss_is_the_loss_for_a_sane_flow_and_nan_for_a_blown_up_one():
    frames = torch.rand(1, 6, 16, 16)
    flow = torch.randn(1, 2, 16, 16, requires_grad=True)
    assert torch.equal(guarded_flow_loss(flow, frames), online_loss(flow, frames))
    for bad in (float("nan"), float("inf"), 2 * MAX_FLOW_PX):
        blown = flow.detach().clone()
        blown[0, 0, 3, 3] = bad
        blown.requires_grad_(True)
        loss = guarded_flow_loss(blown, frames)
        assert torch.isnan(loss)
        loss.backward()  # reaches no grid_sample with such coordinates: the backward runs
        assert blown.grad is not None and torch.isfinite(blown.grad).all()


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@cuda
@pytest.mark.cuda
@pytest.mark.parametrize("stages", [1, 2])
def test_the_service_learner_runs_as_a_cuda_graph_and_learns_as_eagerly(stages):
    """On CUDA the service's learner is captured whole (capturable fused Adam, no host read) and learns what the same
    learner learns eagerly, as closely as two eager runs agree: the flow net's backward adds with atomics
    (``grid_sample``, bilinear upsampling, max pooling), so eager runs differ in their last bits and Adam carries
    that on (seen on an H200: up to 4e-3 in the outputs after ten frames)."""
    from models.streams import generate

    video = generate(64, 12, seed=3).frames[:, :48, :64]
    pairs = [torch.from_numpy(video[i : i + 2]).permute(0, 3, 1, 2).reshape(1, 6, 48, 64).cuda().float() / 255
             for i in range(len(video) - 1)]  # fmt: skip
    runs = {}
    for name, graph in (("eager", False), ("eager again", False), ("graph", True)):
        torch.manual_seed(0)
        net = build_flow_net("fast", init="scratch")
        layers = coarse_then_full(net) if stages == 2 else None
        with online_pipeline(net, pairs[0], stages, layers=layers, devices=["cuda:0"], cuda_graph=graph) as pipe:
            assert (pipe._graphs is not None) == graph
            results = [pipe.step(x, target=x) for x in pairs]
            runs[name] = {r.frame: (r.output, r.loss) for r in results if r.frame is not None}
            if graph:
                assert pipe._graphs._graphs, "no step was captured"
    assert sorted(runs["graph"]) == sorted(runs["eager"]) == sorted(runs["eager again"])

    def gap(other: str) -> tuple[float, float]:
        """The largest difference from the eager run: in the outputs, in the losses."""
        same_frames = [(runs["eager"][f], runs[other][f]) for f in runs["eager"]]
        return (max(float((b[0] - a[0]).abs().max()) for a, b in same_frames),
                max(abs(b[1] - a[1]) for a, b in same_frames))  # fmt: skip

    noise_out, noise_loss = gap("eager again")
    graph_out, graph_loss = gap("graph")
    assert graph_out <= max(1e-5, 10 * noise_out), (graph_out, noise_out)
    assert graph_loss <= max(1e-5, 10 * noise_loss), (graph_loss, noise_loss)
