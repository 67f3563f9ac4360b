"""The learner's checkpoints are written beside the frame loop: taking one returns before it is stored, each is
answered once stored (or failed) in the order taken, and closing stores what was taken."""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

from server.stream import checkpoints
from server.stream.checkpoints import Checkpoint
from server.stream.learner.checkpoint_writer import CheckpointWriter
from server.stream.protocol import CheckpointWritten

WAIT_S = 10


class HeldCheckpoint(Checkpoint):
    """A checkpoint whose write waits until the test lets it go."""

    def __init__(self, state: dict, location: Path, frames: int, release: threading.Event) -> None:
        super().__init__(state, location, frames)
        object.__setattr__(self, "release", release)

    def write(self) -> None:
        assert self.release.wait(WAIT_S)
        super().write()


@dataclass
class FakeLearner:
    """Hands out the checkpoints queued here, one per call, as ``Learner.take_checkpoint`` would take them."""

    taken: list = field(default_factory=list)

    def take_checkpoint(self) -> Checkpoint | None:
        got = self.taken.pop(0)
        if isinstance(got, Exception):
            raise got
        return got


def state(frames: int) -> dict:
    return {"pipeline": {"frames": frames, "weights": torch.full((3,), float(frames))}}


def answers(out: queue.Queue, n: int) -> list[CheckpointWritten]:
    return [out.get(timeout=WAIT_S) for _ in range(n)]


def test_a_checkpoint_is_taken_at_once_and_answered_once_stored(tmp_path):
    release, out = threading.Event(), queue.Queue()
    path = tmp_path / "s.pt"
    learner = FakeLearner([HeldCheckpoint(state(7), path, 7, release)])
    writer = CheckpointWriter(learner, out)
    writer.checkpoint(request=3)  # returns while the write waits: the frame loop goes on
    assert out.empty() and not path.exists()
    release.set()
    assert answers(out, 1) == [CheckpointWritten(7, 3, None)]
    assert checkpoints.load(path)["pipeline"]["frames"] == 7  # answered: stored
    writer.close()


def test_checkpoints_are_written_in_the_order_taken_and_closing_stores_the_last(tmp_path):
    out = queue.Queue()
    path = tmp_path / "s.pt"
    learner = FakeLearner([Checkpoint(state(n), path, n) for n in (1, 2, 3)])
    writer = CheckpointWriter(learner, out)
    for _ in range(3):
        writer.checkpoint()
    writer.close()
    assert [a.frames for a in answers(out, 3)] == [1, 2, 3]
    assert checkpoints.load(path)["pipeline"]["frames"] == 3


def test_non_finite_weights_and_failures_are_answered_and_the_writer_goes_on(tmp_path):
    out = queue.Queue()
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    good = tmp_path / "s.pt"
    learner = FakeLearner([
        None,  # weights already non-finite: never saved
        RuntimeError("a stage is gone"),
        Checkpoint(state(4), blocked / "s.pt", 4),  # its folder is a file: the write fails
        Checkpoint({"pipeline": {"frames": 6, "a lambda": lambda: 0}}, good, 6),  # torch.save cannot pickle it
        Checkpoint(state(5), good, 5),
    ])  # fmt: skip
    writer = CheckpointWriter(learner, out)
    for request in (1, 2, 3, 5, 4):
        writer.checkpoint(request)
    writer.close()
    got = {a.request: a for a in answers(out, 5)}
    assert got[1] == CheckpointWritten(-1, 1, None)
    assert got[2].frames == -1 and got[2].error.startswith("cannot take the checkpoint")
    assert got[3].frames == -1 and got[3].error.startswith("cannot write the checkpoint")
    assert str(tmp_path) not in got[3].error  # in words, no server path
    assert got[5].frames == -1 and got[5].error.startswith("cannot write the checkpoint")  # and the writer goes on
    assert got[4] == CheckpointWritten(5, 4, None)
    assert checkpoints.load(good)["pipeline"]["frames"] == 5


ON_GPU = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@pytest.mark.parametrize(("frames", "device"), [(0, "cpu"), (12, "cpu"), pytest.param(12, "cuda:0", marks=ON_GPU)])
def test_the_checkpoint_the_learner_takes_is_what_save_writes(tmp_path, frames, device):
    """``Learner.save`` is the checkpoint taken and written at once: the same frames, the same weights on disk; a GPU
    learner's checkpoint lies on the CPU (the writer's thread never touches the GPU)."""
    from server.stream.learner.learner import Learner, LearnerConfig

    cfg = LearnerConfig(name="unit", model="fast", init="scratch", stages=1, lr=1e-3, schedule="partime",
                        devices=(device,), checkpoint_path=tmp_path / "s.pt")  # fmt: skip
    learner = Learner(cfg, (64, 48))
    try:
        x = torch.rand(1, 6, 48, 64, device=device)
        for _ in range(frames):
            learner.step(x)
        taken = learner.take_checkpoint()
        assert taken is not None and taken.frames == learner.save()
        tensors = [t for stage in taken.state["pipeline"]["stages"] for t in stage["module"].values()]
        assert tensors and all(t.device.type == "cpu" for t in tensors)
        saved = checkpoints.load(cfg.checkpoint_path)["pipeline"]
        for a, b in zip(taken.state["pipeline"]["stages"], saved["stages"], strict=True):
            for name, t in a["module"].items():
                assert torch.equal(t, b["module"][name])
    finally:
        learner.close()
