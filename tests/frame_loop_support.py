"""A learner process's frame loop as the frame-loop tests build it: a small net at a known split, no profiling, a
ring that wants every picture and an outbox that keeps what the loop says."""

from __future__ import annotations

from models.flow_nets import FLOW_NETS
from server.stream.learner import budget
from server.stream.learner.frame_loop import FrameLoop
from server.stream.learner.learner import Learner, LearnerConfig
from server.stream.learner.process_config import LearnerProcessConfig
from server.stream.learner.profile_cache import JsonCache, key
from server.stream.sizing import LearningSizes

DISPLAY = (128, 96)
FPS = 10.0


class Ring:
    wanted = 0b111  # every picture wanted: the whole work a frame can cost


class Out(list):
    put = list.append


def make_loop(directory, lag: int, auto: bool = True, display=DISPLAY, init: str = "scratch") -> FrameLoop:
    lc = LearnerConfig("slow", "fast", init, 2, None, "partime", None, directory / "slow.pt")
    cfg = LearnerProcessConfig(lc, display, FPS, LearningSizes(max(display), False, None, None, auto), 60.0, 80, None)
    ladder = cfg.ladder
    splits = JsonCache(directory / "splits.json")
    layers = len(FLOW_NETS["fast"]())
    splits.put(key("fast", ladder[0], 2, "cpu"), [layers - layers // 2, layers // 2])  # known: no profiling here
    learner = Learner(lc, ladder[0], splits)
    controller = budget.BudgetController(ladder, 0, FPS, auto=auto)
    return FrameLoop(cfg, learner, controller, Ring(), Out(), [].append, lag=lag)
