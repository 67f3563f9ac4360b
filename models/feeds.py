"""Feeds: what turns each real pair of a stream into a learner's step, and what the stream shows of each step.

Why apart from ``models.online``: a feed is the stream's side of learning (what it has seen of its own motion, noise,
light and codec, and what it shows), where ``models.online`` sets up the learner's rates and pipeline; a feed is made
by ``Learning.feed`` and called by ``predict_then_learn`` and the service's learner alike.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

from pipeline_core import Pipeline

from .block_codec import MADE_QUALITY, READ_EVERY, StreamCodec
from .flow_memory import FlowMemory
from .known_motion import KnownMotion, StreamMotion
from .still_gate import CAMERA_READING
from .stream_flicker import StreamFlicker
from .stream_noise import StreamNoise
from .stream_sharpening import StreamSharpening

#: The option that only the priors' optimizer group holds (``models.online.flow_optimizer``), by which the learner
#: finds it.
PRIOR_GROUP = "anchor"


class Feed:
    """Turns each real pair into a pipeline step's input and target, and reads what the step showed. The pair shown is
    always sample 0 of the input (``shown``). ``learns``: whether the last input made has anything to learn from (its
    step's loss is then a measure; known nowhere, it is 0 by construction)."""

    learns = True

    def __call__(self, pair: Tensor, contiguous: bool = True) -> tuple[Tensor, Tensor]:
        """``pair``'s step input and target; ``contiguous``: its frames follow one another in the source (none
        skipped between them)."""
        return pair, pair

    def observe(self, output: Tensor, readings: Mapping[str, Tensor] | None = None) -> None:
        """The flow a step put out and what its layers read (``StepResult.readings``), for the pairs still to come."""

    def show(self, output: Tensor) -> Tensor:
        """A step's ``output`` as the stream shows it (after ``observe``, once per output, in order): its pair's flow
        (``shown``) may be more than the net's alone."""
        return output

    def judgment(self) -> Tensor | None:
        """Pairs the stream's frozen start (``Learning.frozen_start``, whole) is to run for a judgment of the stream's
        own, the newest offered and not yet taken; None if none."""
        return None

    def judged(self, flows: Tensor) -> None:
        """The frozen start's flows of the pairs ``judgment`` gave (in their order)."""

    def tune(self, pipe: Pipeline) -> None:
        """Set what the stream asks of ``pipe``'s optimizers, where that changed (after each step)."""

    def retune(self) -> None:
        """Set it again at the next ``tune``: ``pipe`` loaded weights and optimizer states saved with other options."""

    @property
    def reads(self) -> dict[str, bool]:
        """What it reads of the stream's frames, by name, each as it holds now (the stream's notes say each change)."""
        return {
            "starved_codec": self.starved_codec,
            "noisy_camera": self.noisy_camera,
            "flickering_light": self.flickering_light,
            "sharpened_frames": self.sharpened_frames,
        }

    @property
    def starved_codec(self) -> bool:
        """Whether it learns as for the frames of a starved block codec (``KnownMotionFeed``)."""
        return False

    @property
    def noisy_camera(self) -> bool:
        """Whether it smooths the pairs of a camera whose noise outweighs its picture's detail (``KnownMotionFeed``)."""
        return False

    @property
    def flickering_light(self) -> bool:
        """Whether it brings the pairs of a flickering light to one light row by row (``KnownMotionFeed``)."""
        return False

    @property
    def sharpened_frames(self) -> bool:
        """Whether it shows the pairs sharpened, its frozen start's flow agreeing with itself better so
        (``KnownMotionFeed``)."""
        return False


class KnownMotionFeed(Feed):
    """Each step's input: the real pair (shown) and a pair made from its second frame with a known flow (learned
    from; ``models.known_motion``); the target: that flow. The made pair moves as much as the stream does
    (``StreamMotion``), and borrows the stream's noise and change of light through the newest flow the learner showed
    (zero flow until it has shown one). For a pipeline of ``stages``, each made pair is then served ``stages - 1``
    pairs more known nowhere (``KnownMotion``'s ``unknown``): no stage pushes one pair's gradient through another.

    A stream that reaches the net through a starved block codec (``models.block_codec.StreamCodec``) gets made pairs
    through a codec's round trip, and ``prior_options[True]`` for its priors' optimizer group (``PRIOR_GROUP``), the
    others ``prior_options[False]`` (``Learning.prior_options``): only a made pair that looks coded teaches the net a
    starved codec's frames, and the priors then learn it only let go of their start and faster. Where a grid alone
    called a stream starved, a real clip coded well lost 3 % on its moving pixels
    (docs/notebook/2026-12-06-made-pairs-through-a-codec-for-a-starved-stream.md). Such a stream also shows its
    flows through a memory of the flows before (``models.flow_memory``), which fills in the blocks the encoder left
    still. A stream whose sensor noise outweighs its picture's detail (a night camera: ``models.stream_noise``) is
    shown, and learns from, its pairs smoothed as much as its noise asks; one whose light flickers
    (``models.stream_flicker``), its pairs brought to one light row by row first. Any other stream is shown, and learns
    from, its pairs sharpened where its frozen start's flow agrees with itself better so (``models.stream_sharpening``:
    the judgments the start runs, ``judgment``)."""

    def __init__(
        self, seed: int = 0, stages: int = 1, prior_options: Mapping[bool, Mapping[str, float]] | None = None
    ) -> None:
        self.motion = KnownMotion(seed, KNOWN_HOLD, KNOWN_EVERY, unknown=stages - 1)
        self.stream = StreamMotion()
        self.codec = StreamCodec()
        self.memory = FlowMemory()
        self.flicker = StreamFlicker(stages)
        self.noise = StreamNoise()
        self.sharpening = StreamSharpening()
        self.prior_options = prior_options
        self.flow: Tensor | None = None
        self._set: bool | None = False  # the decision whose options the optimizers hold (as built), None: not known

    def __call__(self, pair: Tensor, contiguous: bool = True) -> tuple[Tensor, Tensor]:
        flow = self.flow if self.flow is not None and self.flow.shape[-2:] == pair.shape[-2:] else None
        if flow is None:
            flow = pair.new_zeros(1, 2, *pair.shape[-2:])
        flow = flow.to(pair.device)
        self.codec.observe(pair, contiguous)
        self.flicker.observe(pair, flow)
        pair = self.flicker(pair)
        self.noise.observe(pair, flow)
        self.sharpening.observe(pair)
        pair = self.noise(pair) if self.noise.noisy else self.sharpening(pair)
        known = self.motion(pair, flow, self.stream, MADE_QUALITY if self.codec.starved else None)
        self.learns = known.known
        return torch.cat([pair, known.pair]), known.target()

    def judgment(self) -> Tensor | None:
        return self.sharpening.judgment()

    def judged(self, flows: Tensor) -> None:
        self.sharpening.judged(flows)

    def tune(self, pipe: Pipeline) -> None:
        """The priors' options as the stream's codec asks, once its evidence was read and where they differ."""
        if self.prior_options is not None and self.codec.pairs >= READ_EVERY and self._set != self.codec.starved:
            pipe.set_group_options(PRIOR_GROUP, self.prior_options[self.codec.starved])
            self._set = self.codec.starved

    def retune(self) -> None:
        self._set = None

    @property
    def starved_codec(self) -> bool:
        return self.codec.starved

    @property
    def noisy_camera(self) -> bool:
        return self.noise.noisy

    @property
    def flickering_light(self) -> bool:
        return self.flicker.flickering

    @property
    def sharpened_frames(self) -> bool:
        return self.sharpening.sharpens and not self.noise.noisy

    def observe(self, output: Tensor, readings: Mapping[str, Tensor] | None = None) -> None:
        """A non-finite flow (a broken frame's) counts as none: it would spoil every pair made after it. The camera's
        motion is the still gate's reading where it has one (``StreamMotion``)."""
        self.flow = torch.nan_to_num(shown(output).detach(), nan=0.0, posinf=0.0, neginf=0.0)
        camera = (readings or {}).get(CAMERA_READING)
        if camera is not None:
            camera = torch.nan_to_num(camera[:1].to(self.flow), nan=0.0, posinf=0.0, neginf=0.0)
        self.stream.observe(self.flow, camera)

    def show(self, output: Tensor) -> Tensor:
        if not self.codec.starved:
            self.memory.reset()
            return output
        return torch.cat([self.memory(shown(output)), output[1:]])


#: How many pairs one made pair serves, as it was made, every how many pairs (``models.known_motion.KnownMotion``):
#: every second one, as the first stage of a two-stage PARTIME pipeline learns from the pair two steps before.
KNOWN_HOLD, KNOWN_EVERY = 4, 2


def shown(output: Tensor) -> Tensor:
    """The flow of the pair a step showed (sample 0), (1, 2, H, W)."""
    return output[:1]
