"""A new stream goes to the GPU with the fewest streams, all its stages on it; what it asked for stands; without a
GPU it learns on the CPU, with the CPU's largest learning size."""

from __future__ import annotations

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
