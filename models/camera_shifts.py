"""What a real camera does to a picture that pretraining did not show: shifted versions of an exact-flow stream.

Why: the shipped net was pretrained on clean-ish generated clips (``models.scenes``: mild noise, mild flicker, H.264 at
CRF 18-33). A camera at night, a shaky shutter, a starved encoder or a thermal sensor's false colours are where the
start is weakest and where learning while watching has the most to gain; the adaptation benchmark
(``bench.adaptation``) scores the online learner on them. Every shift changes the pixels only, never the geometry, so
the stream's exact flow still holds (motion blur averages the picture along that same flow).

Each shift is deterministic for a given seed: ``shift(stream, name, seed)``.
"""

from __future__ import annotations

from collections.abc import Callable

import cv2
import numpy as np

from .scenes import h264_round_trip
from .streams import Stream

#: A night camera's picture: the scene at this share of its light, around this black level, then sensor noise of this
#: standard deviation (8-bit levels) that grows with the light (shot noise) on top of a floor (read noise).
NIGHT_GAIN, NIGHT_BLACK, NIGHT_READ_NOISE, NIGHT_SHOT_NOISE = 0.22, 6.0, 3.0, 0.35
#: Heavy motion blur: a long exposure smears each point along three frames' worth of its motion (a camera in dim light
#: at a low shutter speed), in this many samples.
BLUR_SHUTTER, BLUR_SAMPLES = 3.0, 15
#: A starved H.264 encoder (``models.scenes`` pretrains on CRF 18-33).
LOW_BITRATE_CRF = 38
#: Mains flicker seen by a camera whose rate is not a multiple of it: the picture's gain swings this much, with this
#: period in frames, and a dark band this deep rolls down the picture (a rolling shutter under a flickering light).
FLICKER_DEPTH, FLICKER_PERIOD, FLICKER_BAND = 0.25, 3.3, 0.2


def _as_uint8(images: np.ndarray) -> np.ndarray:
    return np.clip(np.rint(images), 0, 255).astype(np.uint8)


def night(frames: np.ndarray, flow: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Dark, low contrast and noisy: little light, a raised black level, shot and read noise."""
    light = frames.astype(np.float32) * NIGHT_GAIN
    sigma = np.sqrt(NIGHT_READ_NOISE**2 + NIGHT_SHOT_NOISE**2 * light)
    return _as_uint8(NIGHT_BLACK + light + sigma * rng.standard_normal(frames.shape, dtype=np.float32))


def motion_blur(frames: np.ndarray, flow: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Each frame the mean of the picture along its own motion over the shutter time: frame t is read at x + s·u(x)
    for s across [-shutter/2, shutter/2], u the flow to the next frame (the last frame takes the flow before it)."""
    h, w = frames.shape[1:3]
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float32)
    out = np.empty_like(frames)
    for t, frame in enumerate(frames):
        u = flow[min(t, len(flow) - 1)]
        total = np.zeros(frame.shape, np.float32)
        for s in np.linspace(-BLUR_SHUTTER / 2, BLUR_SHUTTER / 2, BLUR_SAMPLES, dtype=np.float32):
            total += cv2.remap(frame, xs + s * u[..., 0], ys + s * u[..., 1], cv2.INTER_LINEAR,
                               borderMode=cv2.BORDER_REFLECT101)  # fmt: skip
        out[t] = _as_uint8(total / BLUR_SAMPLES)
    return out


def low_bitrate(frames: np.ndarray, flow: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """An H.264 round trip at a starved rate: blocks, ringing, smeared chroma, detail gone."""
    return h264_round_trip(frames, LOW_BITRATE_CRF)


def false_colour(frames: np.ndarray, flow: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """An infrared-like picture: one channel of intensity (here the inverted luma, as hot things read bright where the
    visible picture is dark), shown through a false-colour map."""
    out = np.empty_like(frames)
    for t, frame in enumerate(frames):
        grey = 255 - cv2.cvtColor(frame, cv2.COLOR_RGB2GRAY)
        out[t] = cv2.cvtColor(cv2.applyColorMap(grey, cv2.COLORMAP_INFERNO), cv2.COLOR_BGR2RGB)
    return out


def flicker(frames: np.ndarray, flow: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A light flickering against the frame rate: the whole picture's gain swings, and a darker band rolls down it."""
    t = np.arange(len(frames), dtype=np.float32)
    phase = rng.uniform(0, 2 * np.pi)
    gain = 1 + FLICKER_DEPTH * np.sin(2 * np.pi * t / FLICKER_PERIOD + phase)
    h = frames.shape[1]
    rows = np.arange(h, dtype=np.float32) / h
    band = 1 - FLICKER_BAND * np.cos(np.pi * ((rows[None, :] + 0.37 * t[:, None] + phase) % 1.0 - 0.5)) ** 8
    scale = gain[:, None] * band
    return _as_uint8(frames.astype(np.float32) * scale[:, :, None, None])


SHIFTS: dict[str, Callable[[np.ndarray, np.ndarray, np.random.Generator], np.ndarray]] = {
    "night": night,
    "blur": motion_blur,
    "h264": low_bitrate,
    "infrared": false_colour,
    "flicker": flicker,
}


def shift(stream: Stream, name: str, seed: int = 0) -> Stream:
    """``stream`` as the shift ``name`` (one of ``SHIFTS``) shows it, same flow."""
    if name not in SHIFTS:
        raise ValueError(f"unknown shift {name!r}; choose one of {', '.join(SHIFTS)}")
    return Stream(SHIFTS[name](stream.frames, stream.flow, np.random.default_rng(seed)), stream.flow)
