"""Ground-truth optical-flow streams made from photographs bundled with scikit-image (offline).

Why synthetic: unsupervised flow learned online has no labels, so only a stream whose motion we
choose tells us how good the learned flow really is (end-point error). Each frame samples a photo
through a smooth, time-varying global affine camera (translation, rotation, zoom); textured patches
cut from other photos move independently on top (they occlude, and move faster than the camera).
Every mapping is analytic, so the flow between consecutive frames is exact.

File format (read by the bench, the server and the checks): ``.npz`` with ``frames`` uint8
[T, H, W, 3] RGB and ``flow`` float32 [T-1, H, W, 2], where ``flow[t]`` maps pixel (x, y) of frame t
to (x + u, y + v) in frame t+1. Any stream can also be written as an H.264 ``.mp4`` (PyAV).

CLI: ``python -m models.streams --out demo.npz --size 128 --frames 300 --seed 0 --photo astronaut``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

#: Colour photos shipped inside scikit-image (no download needed).
PHOTOS = ("astronaut", "coffee", "chelsea", "rocket", "immunohistochemistry", "hubble_deep_field", "colorwheel")
#: Photos that only texture the moving patches (greyscale ones are made RGB).
TEXTURES = PHOTOS + ("brick", "grass", "gravel", "camera", "coins", "moon")


@dataclass(frozen=True)
class Stream:
    frames: np.ndarray  # uint8 [T, H, W, 3]
    flow: np.ndarray  # float32 [T-1, H, W, 2]


def load_photo(name: str) -> np.ndarray:
    """A bundled scikit-image photo as float32 RGB in [0, 255]."""
    import skimage.data

    if name not in TEXTURES:
        raise ValueError(f"unknown photo {name!r}; choose one of {', '.join(TEXTURES)}")
    image = np.asarray(getattr(skimage.data, name)())
    if image.ndim == 2:
        image = np.repeat(image[..., None], 3, axis=2)
    return image[..., :3].astype(np.float32)


def _rotation(angle: np.ndarray | float) -> np.ndarray:
    c, s = np.cos(angle), np.sin(angle)
    return np.array([[c, -s], [s, c]], dtype=np.float64)


class _Wave:
    """A smooth bounded signal: a sum of two sinusoids with random frequencies and phases."""

    def __init__(self, rng: np.random.Generator, amplitude: float, period: tuple[float, float]) -> None:
        self.amp = amplitude * rng.uniform(0.6, 1.0, size=2) * np.array([1.0, 0.5])
        self.omega = 2 * np.pi / rng.uniform(*period, size=2)
        self.phase = rng.uniform(0, 2 * np.pi, size=2)

    def __call__(self, t: float) -> float:
        return float(np.sum(self.amp * np.sin(self.omega * t + self.phase)))


class _Camera:
    """Frame pixel x -> photo point q = centre(t) + zoom(t) R(angle(t)) (x - frame centre)."""

    def __init__(self, rng: np.random.Generator, size: int, photo_shape: tuple[int, int], speed: float) -> None:
        h, w = photo_shape
        self.photo_centre = np.array([w / 2, h / 2])
        self.frame_centre = np.array([(size - 1) / 2, (size - 1) / 2])
        # Mean speed ~ speed*size px/frame: amplitude * omega ~ speed*size with periods of 60-160 frames.
        amp = speed * size * 110 / (2 * np.pi)
        self.tx, self.ty = _Wave(rng, amp, (60, 160)), _Wave(rng, amp, (60, 160))
        self.angle = _Wave(rng, np.deg2rad(8), (90, 200))
        self.log_zoom = _Wave(rng, 0.12, (90, 200))

    def matrix(self, t: float) -> np.ndarray:
        """2x3 affine frame -> photo."""
        lin = np.exp(self.log_zoom(t)) * _rotation(self.angle(t))
        centre = self.photo_centre + np.array([self.tx(t), self.ty(t)])
        return np.hstack([lin, (centre - lin @ self.frame_centre)[:, None]])


class _Patch:
    """A textured square moving on its own path: local u in [-r, r]^2 -> frame c(t) + R(phi(t)) u."""

    def __init__(self, rng: np.random.Generator, size: int, texture: np.ndarray, speed: float) -> None:
        self.radius = size * rng.uniform(0.1, 0.15)
        h, w = texture.shape[:2]
        margin = self.radius * 1.5
        self.tex_centre = np.array([rng.uniform(margin, w - margin), rng.uniform(margin, h - margin)])
        self.texture = texture
        amp = (size / 2 - self.radius) * 0.8
        self.base = np.array([size / 2, size / 2])
        self.cx, self.cy = _Wave(rng, amp, (40, 120)), _Wave(rng, amp, (40, 120))
        # rescale the path so its peak speed is about `speed * size` px/frame
        peak = np.hypot(np.sum(self.cx.amp * self.cx.omega), np.sum(self.cy.amp * self.cy.omega))
        scale = speed * size / max(peak, 1e-6)
        for wave in (self.cx, self.cy):
            wave.amp = wave.amp * min(scale, 1.0)
        self.spin = _Wave(rng, np.deg2rad(20), (60, 150))

    def to_frame(self, t: float) -> np.ndarray:
        """2x3 affine local -> frame."""
        lin = _rotation(self.spin(t))
        centre = self.base + np.array([self.cx(t), self.cy(t)])
        return np.hstack([lin, centre[:, None]])


def _apply(affine: np.ndarray, pts: np.ndarray) -> np.ndarray:
    """Apply a 2x3 affine to points [..., 2]."""
    return pts @ affine[:, :2].T + affine[:, 2]


def _invert(affine: np.ndarray) -> np.ndarray:
    lin_inv = np.linalg.inv(affine[:, :2])
    return np.hstack([lin_inv, (-lin_inv @ affine[:, 2])[:, None]])


def _sample(image: np.ndarray, pts: np.ndarray) -> np.ndarray:
    maps = pts.astype(np.float32)
    return cv2.remap(image, maps[..., 0], maps[..., 1], cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT101)


def _prepare(photo: np.ndarray, size: int, oversize: float) -> np.ndarray:
    """Area-resample the photo so the frame sees it at ~1 photo px per frame px (no aliasing)."""
    scale = oversize * size / min(photo.shape[:2])
    h, w = (round(photo.shape[0] * scale), round(photo.shape[1] * scale))
    interp = cv2.INTER_AREA if scale < 1 else cv2.INTER_CUBIC
    return cv2.resize(photo, (w, h), interpolation=interp)


def generate(
    size: int = 128,
    frames: int = 300,
    seed: int = 0,
    photo: str = "astronaut",
    patches: int = 2,
    camera_speed: float = 0.007,
    patch_speed: float = 0.025,
) -> Stream:
    """A deterministic stream (same arguments, same pixels) with its exact forward flow.

    Speeds are fractions of the frame size per frame, so motion scales with ``size``.
    """
    if size < 16 or frames < 2:
        raise ValueError(f"need size >= 16 and frames >= 2, got size={size}, frames={frames}")
    rng = np.random.default_rng(seed)
    background = _prepare(load_photo(photo), size, oversize=1.6)
    camera = _Camera(rng, size, background.shape[:2], camera_speed)
    others = [p for p in TEXTURES if p != photo]
    movers = [
        _Patch(rng, size, _prepare(load_photo(others[int(i)]), size, 1.0), patch_speed)
        for i in rng.choice(len(others), size=patches, replace=False)
    ]
    ys, xs = np.mgrid[0:size, 0:size].astype(np.float64)
    grid = np.stack([xs, ys], axis=-1)

    out_frames = np.empty((frames, size, size, 3), np.uint8)
    out_flow = np.empty((frames - 1, size, size, 2), np.float32)
    for t in range(frames):
        cam = camera.matrix(t)
        image = _sample(background, _apply(cam, grid))
        if t + 1 < frames:
            flow = _apply(_invert(camera.matrix(t + 1)) @ np.vstack([cam, [0, 0, 1]]), grid) - grid
        for patch in movers:  # later patches are drawn on top
            to_frame = patch.to_frame(t)
            local = _apply(_invert(to_frame), grid)
            inside = np.all(np.abs(local) <= patch.radius, axis=-1)
            image[inside] = _sample(patch.texture, local + patch.tex_centre)[inside]
            if t + 1 < frames:
                flow[inside] = (_apply(patch.to_frame(t + 1), local) - grid)[inside]
        out_frames[t] = np.clip(np.rint(image), 0, 255).astype(np.uint8)
        if t + 1 < frames:
            out_flow[t] = flow
    return Stream(out_frames, out_flow)


def save_npz(stream: Stream, path: str | Path) -> None:
    """Write ``stream`` whole or not at all: a reader never finds half a file (the benchmarks make a cached stream in
    one process while another may load it)."""
    path = Path(path)
    fd, part = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez_compressed(f, frames=stream.frames, flow=stream.flow)
        os.replace(part, path)
    finally:
        Path(part).unlink(missing_ok=True)


def load_npz(path: str | Path) -> Stream:
    """Load and validate a stream file (clear errors for files of the wrong shape). Grayscale frames ([T,H,W] or
    [T,H,W,1], as an infrared or a monochrome camera records them) come back as RGB with three equal channels, which
    is how the nets take them."""
    with np.load(path) as data:
        if "frames" not in data or "flow" not in data:
            raise ValueError(f"{path}: a stream needs arrays 'frames' and 'flow', found {sorted(data.files)}")
        frames, flow = data["frames"], data["flow"]
    if frames.dtype == np.uint8 and (frames.ndim == 3 or (frames.ndim == 4 and frames.shape[3] == 1)):
        frames = np.repeat(frames.reshape(frames.shape[:3] + (1,)), 3, axis=3)
    if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[3] != 3:
        raise ValueError(
            f"{path}: frames must be uint8 [T,H,W,3] (or grayscale [T,H,W]), got {frames.dtype} {frames.shape}"
        )
    t, h, w = frames.shape[:3]
    if flow.shape != (t - 1, h, w, 2):
        raise ValueError(f"{path}: flow must be [{t - 1},{h},{w},2], got {flow.shape}")
    return Stream(frames, flow.astype(np.float32))


#: The smallest side of a stream the benchmarks score (``bench.adaptation``, ``bench.flow``): the nets' coarsest level
#: (1/8) then has 4 cells a side.
MIN_SIDE = 32


def padded(stream: Stream, multiple: int) -> Stream:
    """``stream`` with its frames and flow repeated past the bottom and right edges to sides that divide by
    ``multiple``: the nets take only such sides, and a stream padded so keeps every pixel where it was."""
    h, w = stream.frames.shape[1:3]
    pad = ((0, 0), (0, -h % multiple), (0, -w % multiple), (0, 0))
    return Stream(np.pad(stream.frames, pad, mode="edge"), np.pad(stream.flow, pad, mode="edge"))


def for_net(stream: Stream, multiple: int, shown_as: Callable[[Stream], Stream] | None = None) -> Stream:
    """``stream`` as a net takes it: its frames ``padded`` (and then, if given, as ``shown_as`` shows them, which may
    read the flow at every pixel: motion blur does), its flow cut back to its own pixels, which alone are scored. The
    benchmarks read a stream whose frames reach past its flow so (``bench.adaptation``, ``bench.flow``)."""
    h, w = stream.frames.shape[1:3]
    frames = (shown_as or (lambda s: s))(padded(stream, multiple)).frames
    return Stream(frames, stream.flow[:, :h, :w])


def write_mp4(frames: np.ndarray, path: str | Path, fps: int = 25, crf: int = 18) -> None:
    """H.264 (libx264, yuv420p) video of uint8 RGB frames [T, H, W, 3] through PyAV."""
    import av

    if frames.ndim != 4 or frames.shape[3] != 3 or frames.dtype != np.uint8:
        raise ValueError(f"frames must be uint8 [T,H,W,3], got {frames.dtype} {frames.shape}")
    h, w = frames.shape[1:3]
    if h % 2 or w % 2:
        raise ValueError(f"yuv420p needs even frame sizes, got {w}x{h}")
    with av.open(str(path), mode="w") as container:
        video = container.add_stream("libx264", rate=fps)
        video.width, video.height, video.pix_fmt = w, h, "yuv420p"
        video.options = {"crf": str(crf), "preset": "medium"}
        for frame in frames:
            for packet in video.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in video.encode():
            container.mux(packet)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Generate a ground-truth optical-flow stream (.npz or .mp4).")
    parser.add_argument("--out", required=True, help="output path ending in .npz (frames + flow) or .mp4 (video)")
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--frames", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--photo", default="astronaut", choices=PHOTOS)
    parser.add_argument("--patches", type=int, default=2)
    parser.add_argument("--fps", type=int, default=25, help="frame rate of the .mp4")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if out.suffix not in (".npz", ".mp4"):
        parser.error(f"--out must end in .npz or .mp4, got {out.name}")
    if args.size % 2:
        parser.error("--size must be even (H.264 yuv420p)")
    try:
        stream = generate(args.size, args.frames, args.seed, args.photo, args.patches)
    except ValueError as exc:
        parser.error(str(exc))
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix == ".npz":
        save_npz(stream, out)
    else:
        write_mp4(stream.frames, out, fps=args.fps)
    mean = float(np.linalg.norm(stream.flow, axis=-1).mean()) if len(stream.flow) else 0.0
    print(f"wrote {out}: {args.frames} frames {args.size}x{args.size}, mean flow {mean:.2f} px", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
