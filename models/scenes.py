"""Camera-like clips with exact flow: what the pretrained flow nets learn from (``models.pretrain``).

Why not ``models.streams``: a whole photo warped smoothly does not look like a camera. Real footage is
mostly a static or slowly moving view with a few independent movers that occlude each other and the
background, seen through sensor noise, lighting flicker and a lossy codec. A net trained on smooth
global warps paints static backgrounds and misses small movers; these clips have all of those
properties, and since every layer moves by a known affine map, their flow is still exact.

A clip is a stack of layers, back to front: the background (a photo, or a flat-shaded "cartoon" of
one) and 0-5 movers (ellipses, rectangles, polygons and blobs textured with other photos or flat
colours with an outline). The camera is static, panning or hand-held (a smooth random walk); each
mover adds its own translation, rotation and scale change. Frames are rendered at twice the size and
area-downsampled (anti-aliased edges, as a sensor integrates); the flow of a pixel is that of the
topmost layer covering it in the first frame (the usual convention: where the first frame's pixel
goes). Then, on the pixels only: blur, exposure and flicker, sensor noise, and an H.264 round trip.

Speeds: real footage has fast motion the overlay is for, a hand waved at a webcam or a hand-held pan moves 20-40 px
per frame at 160x120, and a net that never saw it damps it. So a share of the movers (``FAST_MOVER``) and of the
pans run at 8-40 px per frame (``FAST_SPEED``), the rest at 0.15-8 (``SLOW_SPEED``), and a mover is placed so that
it crosses the picture in mid-clip. With a fast motion comes a camera's motion blur: in ``BLURRED`` of the clips the
shutter stays open for a random share of the frame interval, and a frame is the mean of the scene over that time
(sub-frames about half a pixel apart); the flow stays that between the frames' mid-exposure instants.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from .streams import TEXTURES, Stream, load_photo, save_npz, write_mp4

OVERSAMPLE = 2  # rendered at 2x, then area-downsampled
#: Speeds in pixels per frame at the clip's size (log-uniform within each range), and the share of fast movers.
SLOW_SPEED, FAST_SPEED = (0.15, 8.0), (8.0, 40.0)
FAST_MOVER = 0.3
#: Share of clips with motion blur, and the most sub-frames a blurred frame averages.
BLURRED, MAX_SUBFRAMES = 0.5, 24
#: What a clip shows (``camera_clip``'s ``scene``). ``camera``: the pretraining's mix above. ``surveillance``: a static
#: camera watching 3-9 small movers (``SMALL_MOVER``: 5-15 % of the picture's height, as people crossing a square) at
#: ``SMALL_SPEED`` px per frame, as a street or room camera shows; only benchmarks draw it (``bench.scene_flow``).
SCENES = ("camera", "surveillance")
SMALL_MOVER, SMALL_SPEED = (0.05, 0.15), (0.3, 2.0)


@dataclass
class _Layer:
    texture: np.ndarray  # float32 [h, w, 4]: RGB in [0, 255] and alpha in [0, 1], in layer coordinates
    # 3x3 affine layer coordinates -> canvas pixels, per instant: one before the first frame, then one per frame and
    # one after the last (a blurred frame's exposure reaches half a frame either side)
    placements: list[np.ndarray]

    def at(self, t: float) -> np.ndarray:
        """The placement at frame time ``t`` (0 = the first frame), linear between instants."""
        i = min(int(np.floor(t)) + 1, len(self.placements) - 2)
        frac = t + 1 - i
        return (1 - frac) * self.placements[i] + frac * self.placements[i + 1]


def _log_uniform(rng: np.random.Generator, low: float, high: float) -> float:
    return float(np.exp(rng.uniform(np.log(low), np.log(high))))


def _speed(rng: np.random.Generator, fast_share: float) -> float:
    """Canvas pixels per frame: fast (``FAST_SPEED``) with probability ``fast_share``, else slow."""
    low, high = FAST_SPEED if rng.random() < fast_share else SLOW_SPEED
    return OVERSAMPLE * _log_uniform(rng, low, high)


def _affine(scale: float, angle: float, tx: float, ty: float) -> np.ndarray:
    c, s = scale * np.cos(angle), scale * np.sin(angle)
    return np.array([[c, -s, tx], [s, c, ty], [0.0, 0.0, 1.0]])


class Textures:
    """Photos bundled with scikit-image, loaded once: the look of real surfaces at no download."""

    def __init__(self) -> None:
        self.photos = [load_photo(name) for name in TEXTURES]

    def crop(self, rng: np.random.Generator, height: int, width: int) -> np.ndarray:
        """A random crop of a random photo, rescaled to [height, width], flipped and colour-jittered."""
        photo = self.photos[rng.integers(len(self.photos))]
        ph, pw = photo.shape[:2]
        zoom = rng.uniform(0.5, 1.5)
        ch, cw = min(ph, max(8, round(height / zoom))), min(pw, max(8, round(width / zoom)))
        y, x = rng.integers(0, ph - ch + 1), rng.integers(0, pw - cw + 1)
        crop = cv2.resize(photo[y : y + ch, x : x + cw], (width, height), interpolation=cv2.INTER_AREA)
        if rng.random() < 0.5:
            crop = crop[:, ::-1]
        gains = rng.uniform(0.7, 1.3, size=3) * rng.uniform(0.6, 1.2)
        return np.clip(crop * gains, 0, 255).astype(np.float32)


def _cartoon(image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Flat-shaded version of an image (animation-like): smoothed, then few colour levels, dark edges."""
    smooth = cv2.bilateralFilter(image.astype(np.float32), 9, 60, 7)
    levels = rng.integers(3, 7)
    flat = np.floor(smooth / 256 * levels) * (255 / (levels - 1))
    edges = cv2.Canny(smooth.astype(np.uint8), 60, 140) > 0
    flat[cv2.dilate(edges.astype(np.uint8), np.ones((2, 2), np.uint8)) > 0] = 20
    return np.clip(flat, 0, 255).astype(np.float32)


def _shape_mask(rng: np.random.Generator, size: int) -> np.ndarray:
    """float32 [size, size] alpha of an ellipse, rectangle, polygon or blob filling most of the square."""
    mask = np.zeros((size, size), np.uint8)
    c, r = size / 2, size * 0.45
    kind = rng.choice(["ellipse", "rectangle", "polygon", "blob"])
    if kind == "ellipse":
        axes = (int(r), int(r * rng.uniform(0.35, 1.0)))
        cv2.ellipse(mask, (int(c), int(c)), axes, float(rng.uniform(0, 180)), 0, 360, 255, -1)
    else:
        n = {"rectangle": 4, "polygon": int(rng.integers(3, 8)), "blob": 24}[kind]
        angles = np.sort(rng.uniform(0, 2 * np.pi, n)) if kind != "rectangle" else np.array([0.8, 2.3, 3.9, 5.5])
        angles = angles + rng.uniform(0, 2 * np.pi)
        radii = r * (rng.uniform(0.55, 1.0, n) if kind != "rectangle" else np.ones(n))
        if kind == "blob":  # a smooth random outline: a few low harmonics
            k = np.arange(1, 4)
            phases, amps = rng.uniform(0, 2 * np.pi, 3), rng.uniform(0, 0.25, 3)
            radii = r * (0.7 + np.sum(amps[:, None] * np.sin(k[:, None] * angles[None] + phases[:, None]), 0))
        points = np.stack([c + radii * np.cos(angles), c + radii * np.sin(angles)], 1)
        cv2.fillPoly(mask, [np.round(points).astype(np.int32)], 255)
    return mask.astype(np.float32) / 255.0


def _camera_path(
    rng: np.random.Generator, frames: int, canvas: tuple[int, int], world: tuple[int, int], kind: str | None = None
) -> list:
    """Per instant (``_Layer.placements``), world (background texture) -> canvas: static, panning, or hand-held
    (``kind``; drawn when None)."""
    ch, cw = canvas
    wh, ww = world
    kind = kind or rng.choice(["static", "pan", "handheld"], p=[0.4, 0.3, 0.3])
    start = _affine(1.0, 0.0, -(ww - cw) / 2, -(wh - ch) / 2)
    velocity = np.zeros(4)  # d(log scale), d(angle), dx, dy per frame, in canvas pixels
    if kind == "pan":
        speed, heading = _speed(rng, FAST_MOVER), rng.uniform(0, 2 * np.pi)
        velocity = np.array(
            [rng.normal(0, 0.003), rng.normal(0, 0.002), speed * np.cos(heading), speed * np.sin(heading)]
        )
    shake = _log_uniform(rng, 0.5, 12.0)  # a steady hand to a shaky one
    jitter = np.array([0.002, 0.002, 1.0, 1.0]) * shake if kind == "handheld" else np.zeros(4)
    state, drift, path = np.zeros(4), np.zeros(4), []
    for _ in range(frames + 2):
        path.append(_about_centre(state, canvas) @ start)
        drift = 0.7 * drift + rng.normal(0, 1, 4) * jitter  # a smooth random walk of the hand
        state = state + velocity + drift
    return path


def _about_centre(state: np.ndarray, canvas: tuple[int, int]) -> np.ndarray:
    """Zoom by e^state[0] and rotate by state[1] about the canvas centre, then shift by state[2:]."""
    ch, cw = canvas
    centre = _affine(1.0, 0.0, cw / 2, ch / 2)
    return (
        _affine(1.0, 0.0, state[2], state[3])
        @ centre
        @ _affine(np.exp(state[0]), state[1], 0, 0)
        @ np.linalg.inv(centre)
    )


def _mover(rng: np.random.Generator, textures: Textures, frames: int, canvas: tuple[int, int], cartoon: bool,
           camera: list[np.ndarray], small: bool = False) -> _Layer:  # fmt: skip
    """A shape with its own path (in the world, so the camera moves it too); it may enter or leave. ``small``: a
    surveillance scene's (``SMALL_MOVER``, ``SMALL_SPEED``)."""
    ch, cw = canvas
    size = max(6, int(ch * rng.uniform(*(SMALL_MOVER if small else (0.15, 0.7)))))
    alpha = _shape_mask(rng, size)
    if cartoon or rng.random() < 0.15:
        colour = rng.uniform(0, 255, 3).astype(np.float32)
        rgb = np.broadcast_to(colour, (size, size, 3)) + rng.normal(0, 4, (size, size, 3)).astype(np.float32)
        outline = cv2.morphologyEx((alpha > 0.5).astype(np.uint8), cv2.MORPH_GRADIENT, np.ones((3, 3), np.uint8))
        rgb = np.where(outline[..., None] > 0, 15.0, rgb).astype(np.float32)
    else:
        rgb = textures.crop(rng, size, size)
    texture = np.dstack([rgb, alpha]).astype(np.float32)
    speed = OVERSAMPLE * _log_uniform(rng, *SMALL_SPEED) if small else _speed(rng, FAST_MOVER)
    heading = rng.uniform(0, 2 * np.pi)
    velocity = np.array([rng.normal(0, 0.01), rng.normal(0, 0.03), speed * np.cos(heading), speed * np.sin(heading)])
    accel = np.array([0.0, 0.0, *rng.normal(0, 0.15, 2)])
    # Where it is in mid-clip: a fast mover crosses the picture instead of leaving it before the clip starts.
    centre = np.array([rng.uniform(0.05, 0.95) * cw, rng.uniform(0.1, 0.9) * ch]) - velocity[2:] * (frames + 1) / 2
    state = np.array([np.log(rng.uniform(0.8, 1.2)), rng.uniform(-0.5, 0.5), 0.0, 0.0])
    to_centre = _affine(1.0, 0.0, -size / 2, -size / 2)
    placements = []
    world_from_canvas0 = np.linalg.inv(camera[0])
    for t in range(frames + 2):
        local = _affine(np.exp(state[0]), state[1], centre[0] + state[2], centre[1] + state[3]) @ to_centre
        placements.append(camera[t] @ world_from_canvas0 @ local)
        state, velocity = state + velocity, velocity + accel
    return _Layer(texture, placements)


def _footprint(layer: _Layer, place: np.ndarray, canvas: tuple[int, int]) -> tuple[slice, slice]:
    """The canvas rows and columns a layer placed by ``place`` can cover (its texture's corners, a pixel wider)."""
    h, w = layer.texture.shape[:2]
    corners = place[:2] @ np.array([[0, w, 0, w], [0, 0, h, h], [1, 1, 1, 1]], np.float64)
    x0, y0 = np.floor(corners.min(axis=1)).astype(int) - 1
    x1, y1 = np.ceil(corners.max(axis=1)).astype(int) + 2
    return slice(max(y0, 0), max(min(y1, canvas[0]), 0)), slice(max(x0, 0), max(min(x1, canvas[1]), 0))


def _composite(layers: list[_Layer], t: float, canvas: tuple[int, int]) -> tuple[np.ndarray, list]:
    """The layers at frame time ``t`` back to front: float RGB [h, w, 3] and, per layer, the canvas region it may
    cover with its alpha there [h', w', 1]. Only that region is warped and blended (a mover is small)."""
    ch, cw = canvas
    image, covers = np.zeros((ch, cw, 3), np.float32), []
    for layer in layers:
        place = layer.at(t)
        background = layer is layers[0]
        rows, cols = (slice(0, ch), slice(0, cw)) if background else _footprint(layer, place, canvas)
        size = (cols.stop - cols.start, rows.stop - rows.start)
        if min(size) <= 0:
            covers.append((rows, cols, np.zeros((0, 0, 1), np.float32)))
            continue
        shifted = _affine(1.0, 0.0, -cols.start, -rows.start) @ place
        border = cv2.BORDER_REFLECT101 if background else cv2.BORDER_CONSTANT
        warped = cv2.warpAffine(layer.texture, shifted[:2], size, flags=cv2.INTER_LINEAR, borderMode=border)
        alpha = warped[..., 3:4]
        if background:  # opaque everywhere
            image[:] = warped[..., :3]
        else:
            region = image[rows, cols]
            region += (warped[..., :3] - region) * alpha
        covers.append((rows, cols, alpha))
    return image, covers


def _subframes(layers: list[_Layer], t: int, shutter: float, canvas: tuple[int, int]) -> int:
    """How many sub-frames a frame exposed for ``shutter`` frame intervals needs: over the exposure, no layer moves a
    corner of the canvas by more than a canvas pixel (half a pixel of the clip) between two of them."""
    if shutter <= 0:
        return 1
    ch, cw = canvas
    corners = np.array([[0, cw, 0, cw], [0, 0, ch, ch], [1, 1, 1, 1]], np.float64)
    fastest = 0.0
    for layer in layers:
        motion = layer.at(t + shutter / 2) @ np.linalg.inv(layer.at(t - shutter / 2))
        fastest = max(fastest, float(np.linalg.norm((motion @ corners - corners)[:2], axis=0).max()))
    return int(np.clip(np.ceil(fastest), 1, MAX_SUBFRAMES))


def _render(
    layers: list[_Layer], frames: int, canvas: tuple[int, int], shutter: float = 0.0
) -> tuple[np.ndarray, np.ndarray]:
    """Composite the layers back to front: float RGB [T, h, w, 3], each the mean over an exposure of ``shutter``
    frame intervals about its instant, and the exact flow [T-1, h, w, 2] between the instants."""
    ch, cw = canvas
    ys, xs = np.mgrid[0:ch, 0:cw].astype(np.float64)
    grid = np.stack([xs, ys, np.ones_like(xs)], -1)
    images = np.zeros((frames, ch, cw, 3), np.float32)
    flow = np.zeros((frames - 1, ch, cw, 2), np.float32)
    for t in range(frames):
        images[t], covers = _composite(layers, t, canvas)
        count = _subframes(layers, t, shutter, canvas)
        if count > 1:
            instants = t + shutter * (np.arange(count) / (count - 1) - 0.5)
            images[t] = sum(_composite(layers, float(u), canvas)[0] for u in instants) / count
        if t + 1 < frames:
            for layer, (rows, cols, alpha) in zip(layers, covers, strict=True):
                motion = layer.at(t + 1) @ np.linalg.inv(layer.at(t))  # canvas(t) -> canvas(t+1)
                covered = alpha[..., 0] > 0.5
                points = grid[rows, cols][covered]
                flow[t][rows, cols][covered] = (points @ motion[:2].T - points[:, :2]).astype(np.float32)
    return images, flow


def _photometric(images: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Blur, exposure (sometimes clipped), per-frame flicker and sensor noise; uint8 out."""
    sigma = rng.uniform(0.0, 1.0)
    if sigma > 0.3:
        images = np.stack([cv2.GaussianBlur(im, (0, 0), sigma) for im in images])
    exposure = rng.uniform(0.8, 1.5) if rng.random() < 0.3 else rng.uniform(0.85, 1.15)
    flicker = 1 + rng.normal(0, rng.choice([0.0, 0.01, 0.03]), (len(images), 1, 1, 1))
    noise = rng.uniform(0.0, 5.0)
    images = images * exposure * flicker + rng.normal(0, noise, images.shape)
    return np.clip(np.rint(images), 0, 255).astype(np.uint8)


def h264_round_trip(frames: np.ndarray, crf: int) -> np.ndarray:
    """Encode with libx264 (yuv420p) and decode again, in memory: compression artefacts and chroma loss."""
    import av

    t, h, w = frames.shape[:3]
    encoder = av.CodecContext.create("libx264", "w")
    encoder.width, encoder.height, encoder.pix_fmt = w, h, "yuv420p"
    encoder.options = {"crf": str(crf), "preset": "veryfast", "tune": "zerolatency"}
    decoder = av.CodecContext.create("h264", "r")
    packets = []
    for frame in frames:
        packets += encoder.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format="rgb24"))
    packets += encoder.encode(None)
    out = [f.to_ndarray(format="rgb24") for p in packets for f in decoder.decode(p)]
    out += [f.to_ndarray(format="rgb24") for f in decoder.decode(None)]
    if len(out) != t:
        raise RuntimeError(f"H.264 round trip returned {len(out)} of {t} frames")
    return np.stack(out)


def camera_clip(rng: np.random.Generator, width: int = 160, height: int = 120, frames: int = 6,
                textures: Textures | None = None, scene: str = "camera", recorded: int = 1) -> Stream:  # fmt: skip
    """One random camera-like clip of ``frames`` frames at ``width`` x ``height`` with its exact flow; ``scene``, one
    of ``SCENES``. ``recorded``: the camera records ``recorded`` times that size (its noise and H.264 act there), and
    the frames are then downsized, as the service downsizes a camera's decoded frames; 1 (pretraining's) encodes at
    the working size, where H.264 can leave a small, slow mover's blocks standing still while it moves."""
    if width % 2 or height % 2 or frames < 2:
        raise ValueError(f"need even sides and >= 2 frames, got {width}x{height}, {frames} frames")
    if scene not in SCENES:
        raise ValueError(f"unknown scene {scene!r}; choose one of {', '.join(SCENES)}")
    if not 1 <= recorded <= OVERSAMPLE:
        raise ValueError(f"recorded must be 1 to {OVERSAMPLE} times the size, got {recorded}")
    small = scene == "surveillance"
    textures = textures or Textures()
    canvas = (height * OVERSAMPLE, width * OVERSAMPLE)
    world = (int(canvas[0] * 1.6), int(canvas[1] * 1.6))
    cartoon = rng.random() < 0.2
    background = textures.crop(rng, *world)
    if cartoon:
        background = _cartoon(background, rng)
    camera = _camera_path(rng, frames, canvas, world, "static" if small else None)
    layers = [_Layer(np.dstack([background, np.ones(world, np.float32)]), camera)]
    count = rng.integers(3, 10) if small else rng.choice(6, p=[0.1, 0.25, 0.25, 0.2, 0.1, 0.1])
    layers += [_mover(rng, textures, frames, canvas, cartoon, camera, small) for _ in range(count)]
    shutter = rng.uniform(0.2, 1.0) if rng.random() < BLURRED else 0.0
    images, flow = _render(layers, frames, canvas, shutter)
    images = _downsize(images, width * recorded, height * recorded)
    flow = np.stack([cv2.resize(f, (width, height), interpolation=cv2.INTER_AREA) for f in flow]) / OVERSAMPLE
    pixels = _photometric(images, rng)
    if rng.random() < 0.8:
        pixels = h264_round_trip(pixels, int(rng.integers(18, 33)))
    return Stream(_downsize(pixels, width, height), flow.astype(np.float32))


def _downsize(images: np.ndarray, width: int, height: int) -> np.ndarray:
    """Each frame area-averaged to ``width`` x ``height`` (as it is where it already has that size)."""
    if images.shape[1:3] == (height, width):
        return images
    return np.stack([cv2.resize(im, (width, height), interpolation=cv2.INTER_AREA) for im in images])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write camera-like clips with exact flow (.npz and .mp4) to look at.")
    parser.add_argument("--out", required=True, help="folder")
    parser.add_argument("--clips", type=int, default=8)
    parser.add_argument("--frames", type=int, default=24)
    parser.add_argument("--size", default="160x120", help="WxH")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    width, height = (int(v) for v in args.size.split("x"))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rng, textures = np.random.default_rng(args.seed), Textures()
    for i in range(args.clips):
        clip = camera_clip(rng, width, height, args.frames, textures)
        save_npz(clip, out / f"scene_{i}.npz")
        write_mp4(clip.frames, out / f"scene_{i}.mp4", fps=15)
        print(f"scene_{i}: mean flow {np.linalg.norm(clip.flow, axis=-1).mean():.2f} px", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
