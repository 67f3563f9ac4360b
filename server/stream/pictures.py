"""The pictures a viewer can get per frame: ``frame`` (the raw frame, at the picture's size: the source's, up to
``display_side``), ``flow`` (the colour coding of the learned flow at the learning size: ``models.flow_viz``, hue =
direction, saturation = speed, white = still) and ``overlay`` (the frame tinted by the flow's colours, at the
picture's size). The flow itself, as numbers, goes out in standard formats (``flow_formats``), made from the raw
field by the API process.

Choices, measured on a 640x480 picture of a 160x120 field:
- The flow is coloured at the learning size; for the overlay the colours are scaled up to the picture (0.6 ms), not
  the field scaled up and coloured (3.8 ms): the same picture except along motion boundaries.
- ``flow`` goes out at the learning size, where the field has its detail: a viewer that blends it with the frame
  scales it up itself (the browser does, as it draws), and the worker neither scales nor encodes a picture-sized
  JPEG the viewer would only decode again. With the browser on the server's own two cores every share of a core
  counts (``bench/results/service-clip-cpu.md``).
- One colour scale per stream (``FlowScale``, in pixels of the picture per frame), not each frame's own maximum:
  speeds stay comparable from frame to frame and the picture does not flicker.
- The overlay multiplies the frame by a mix of white and the flow's colour (``OPACITY``): still parts (white) keep
  the frame as it is, moving parts take the colour of their motion; a 50/50 blend faded the whole picture.
"""

from __future__ import annotations

import cv2
import numpy as np

from models.flow_viz import ColorTable

from .flow_formats import flo_bytes, kitti_png

JPEG_KINDS = ("overlay", "frame", "flow")  # rendered by the worker, when some viewer wants them
FIELD_KINDS = ("flow16", "flo")  # the raw field, encoded by the API process (``flow_formats``)
KINDS = JPEG_KINDS + FIELD_KINDS
OPACITY = 0.6


def kinds_mask(kinds: list[str] | set[str]) -> int:
    """The JPEG kinds among ``kinds`` as a bit mask (what the worker must render)."""
    return sum(1 << i for i, kind in enumerate(JPEG_KINDS) if kind in kinds)


def mask_kinds(mask: int) -> list[str]:
    return [kind for i, kind in enumerate(JPEG_KINDS) if mask & (1 << i)]


class FlowScale:
    """The speed at the rim of the colour wheel, in pixels of the picture per frame: follows the 99th percentile of
    each frame's speeds, rising quickly and falling slowly, never below ``FLOOR`` (a still scene would otherwise
    paint its noise in full colour)."""

    FLOOR, RISE, FALL, QUANTILE = 1.0, 0.3, 0.03, 99

    def __init__(self) -> None:
        self.value = self.FLOOR

    def update(self, flow: np.ndarray, factor: float) -> float:
        """``flow`` [H, W, 2] in pixels of the learning size; ``factor`` = picture / learning size."""
        speed = cv2.magnitude(np.ascontiguousarray(flow[..., 0]), np.ascontiguousarray(flow[..., 1]))
        top = float(np.percentile(speed, self.QUANTILE)) * factor
        if np.isfinite(top):
            rate = self.RISE if top > self.value else self.FALL
            self.value = max(self.FLOOR, self.value + rate * (top - self.value))
        return self.value


def _jpeg(rgb: np.ndarray, quality: int) -> bytes:
    ok, data = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise RuntimeError("JPEG encoding failed")
    return data.tobytes()


class Painter:
    """Renders the JPEG kinds of one stream's frames."""

    def __init__(self, quality: int) -> None:
        self.quality = quality
        self.table = ColorTable()

    def render(self, frame: np.ndarray, flow: np.ndarray, scale: float, kinds: list[str]) -> dict[str, bytes]:
        """``frame`` uint8 [H, W, 3] RGB (the picture), ``flow`` [h, w, 2] in pixels of the learning size, ``scale``
        in pixels of the picture per frame -> {kind: JPEG bytes} for each of ``kinds`` (JPEG kinds only)."""
        display = (frame.shape[1], frame.shape[0])
        out: dict[str, bytes] = {}
        if "frame" in kinds:
            out["frame"] = _jpeg(frame, self.quality)
        if "flow" in kinds or "overlay" in kinds:
            colors = self.table(flow, scale * flow.shape[1] / display[0])  # the scale in pixels of the learning size
            if "flow" in kinds:
                out["flow"] = _jpeg(colors, self.quality)
            if "overlay" in kinds:
                colors = cv2.resize(colors, display, interpolation=cv2.INTER_LINEAR)
                tint = cv2.addWeighted(colors, OPACITY, np.full_like(colors, 255), 1 - OPACITY, 0.0)
                out["overlay"] = _jpeg(cv2.multiply(frame, tint, scale=1 / 255), self.quality)
        return out


class FramePictures:
    """One frame's pictures as viewers ask for them: the JPEGs the worker rendered, and the raw field in the standard
    formats, encoded on first request (once per frame, however many viewers want it)."""

    def __init__(self, jpegs: dict[str, bytes], flow: np.ndarray) -> None:
        self.flow = flow
        self._made = dict(jpegs)

    def get(self, kind: str) -> bytes | None:
        """The picture of ``kind``; None for a JPEG kind the worker did not render (nobody wanted it then)."""
        if kind not in self._made and kind in FIELD_KINDS:
            self._made[kind] = kitti_png(self.flow) if kind == "flow16" else flo_bytes(self.flow)
        return self._made.get(kind)
