"""A new stream goes to the GPU with the fewest streams, all its stages on it; what it asked for stands; without a
GPU it learns on the CPU, with the CPU's largest learning size. On a cluster, a lost stream that no node has room for
says what it needs and what is free."""

from __future__ import annotations

import pytest

from server import errors
from server.placement import room
from server.placement.gpus import place
from server.settings import Settings
from server.stream.config import StreamConfig, learner_process_config, on_gpu
from server.stream.source.sources import parse_source

GPUS = ["cuda:0", "cuda:1", "cuda:2"]


def test_a_new_stream_goes_to_the_least_loaded_gpu():
    assert place(None, [], GPUS) == ("cuda:0",)
    assert place(None, [("cuda:0",)], GPUS) == ("cuda:1",)
    assert place(None, [("cuda:0",), ("cuda:1",), None], GPUS) == ("cuda:2",)
    assert place(None, [("cuda:0",), ("cuda:1",), ("cuda:2",), ("cuda:1",)], GPUS) == ("cuda:0",)


def test_what_a_stream_asked_for_stands_and_without_a_gpu_it_is_the_cpu():
    assert place(("cuda:2",), [], GPUS) == ("cuda:2",)
    assert place(None, [("cuda:0",)], []) is None
    assert place(("cpu",), [], GPUS) == ("cpu",)


def test_on_the_cpu_the_largest_learning_size_is_the_cpus(tmp_path):
    assert not on_gpu(("cpu",))
    settings = Settings(media_dir=tmp_path, checkpoint_dir=tmp_path, cache_dir=tmp_path)
    spec = parse_source("demo", tmp_path, settings.schemes(), settings.address_policy())
    cfg = StreamConfig("s", "demo", spec, None, None, None, True, "fast", "pretrained", 1, None, "partime", ("cpu",),
                       False)  # fmt: skip
    ladder = learner_process_config(cfg, settings, (640, 480), 30.0, None).ladder
    assert ladder[0] == (160, 120)
    wide = learner_process_config(cfg, settings, (640, 360), 30.0, None).ladder
    assert wide[0] == (184, 104)  # as many pixels as 160x120: a step costs by the pixel
    explicit = Settings(media_dir=tmp_path, checkpoint_dir=tmp_path, cache_dir=tmp_path, learning_side=320)
    assert learner_process_config(cfg, explicit, (640, 480), 30.0, None).ladder[0] == (320, 240)


def test_a_lost_stream_that_no_node_has_room_for_says_what_it_needs_and_what_is_free():
    schema = pytest.importorskip("ray.autoscaler.v2.schema")

    def node(cpus: float, used: float, gpus: float = 0.0) -> object:
        usage = [schema.ResourceUsage("CPU", cpus, used), *([schema.ResourceUsage("GPU", gpus, 0.0)] if gpus else [])]
        return schema.NodeInfo("t", "t", "i", "127.0.0.1", resource_usage=schema.NodeUsage(usage, 0))

    def status(pending: list[dict[str, float]], *nodes: object) -> object:
        demand = schema.RayTaskActorDemand([schema.ResourceRequestByCount(b, 1) for b in pending])
        return schema.ClusterStatus(active_nodes=list(nodes), resource_demands=schema.ResourceDemandSummary(
            ray_task_actor_demand=[demand]))  # fmt: skip

    wants = room.needs(2, 0)
    assert wants == {"CPU": 2.0}
    assert room.waiting_for_room(wants, status([], node(2, 2), node(4, 1))) is None, "nothing waits: Ray starts it"
    assert room.waiting_for_room(wants, status([{"CPU": 1.0}], node(2, 2))) is None, "another shape waits, not this"
    error = room.waiting_for_room(wants, status([{"CPU": 2.0}], node(2, 2), node(4, 3), node(0, 0)))
    assert error["code"] == errors.WAITING_FOR_ROOM
    assert "needs 2 CPUs on one node" in error["message"], error
    assert "the cluster has 1 CPU free, at most 1 on one node (3 nodes)" in error["message"], error
    with_gpu = room.waiting_for_room(room.needs(1, 0.25), status([{"CPU": 1.0, "GPU": 0.25}], node(1, 1, gpus=1)))
    assert "needs 1 CPU and 0.25 GPUs" in with_gpu["message"] and "1 GPU free" in with_gpu["message"], with_gpu
