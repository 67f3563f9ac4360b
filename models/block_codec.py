"""A starved block codec: how to tell that the frames the net learns at came through one, and its round trip.

Why: a stream encoded at a starved rate at the very size the net learns at (a low-bitrate camera learned at its own
size) is the one shifted stream where the shipped net is furthest from the truth, and where a made pair teaches it
nothing unless it looks coded too: a made pair is a frame resampled, whose blocks move with the picture and soften,
where an encoder puts its own on a grid that stands still (docs/notebook/2026-12-01-what-a-starved-encoder-hides.md).
Its evidence is twofold: a grid (the grey level steps across the 8 px blocks' edges more than beside them), and
blocks the encoder left as they were in the frame before. A grid alone is not enough: a real clip coded well, learned
at its own size, shows one too (tree.avi at 320x240), and there learning as for a starved codec cost its moving
pixels 3 % (docs/notebook/2026-12-06-made-pairs-through-a-codec-for-a-starved-stream.md).

The round trip is JPEG's (BT.601 YCbCr, 4:2:0 colour, the 8x8 DCT quantised by the standard tables at a quality) as
tensor ops on the picture's device: no value is read back to the host.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from .luma import luma

#: The side of a codec's transform block (px) and of the blocks its motion search skips (a macroblock).
BLOCK, MACROBLOCK = 8, 16
#: A macroblock the encoder left as it was: its mean absolute change under this share of the grey range (one level).
UNCHANGED = 1.0 / 255

#: JPEG's standard quantisation tables (ITU-T T.81, Annex K), luma and chroma, row by row.
_LUMA_TABLE = (
    (16, 11, 10, 16, 24, 40, 51, 61), (12, 12, 14, 19, 26, 58, 60, 55), (14, 13, 16, 24, 40, 57, 69, 56),
    (14, 17, 22, 29, 51, 87, 80, 62), (18, 22, 37, 56, 68, 109, 103, 77), (24, 35, 55, 64, 81, 104, 113, 92),
    (49, 64, 78, 87, 103, 121, 120, 101), (72, 92, 95, 98, 112, 100, 103, 99),
)  # fmt: skip
_CHROMA_TABLE = (
    (17, 18, 24, 47, 99, 99, 99, 99), (18, 21, 26, 66, 99, 99, 99, 99), (24, 26, 56, 99, 99, 99, 99, 99),
    (47, 66, 99, 99, 99, 99, 99, 99), *((99,) * 8,) * 4,
)  # fmt: skip


def grid_strength(picture: Tensor) -> Tensor:
    """How strongly ``picture`` (1, 3, H, W) shows an 8 px codec grid (0-d): the mean step of its grey level across
    the blocks' edges over the mean step one pixel either side, the lesser of the two axes. About 1 for a picture
    that never went through a block codec at this size (a codec's grid does not survive a resize); 1.16-1.61 for the
    benchmark's H.264 streams at CRF 38."""
    grey = luma(picture.float())[0, 0]
    ratios = []
    for steps in ((grey[1:] - grey[:-1]).abs().mean(1), (grey[:, 1:] - grey[:, :-1]).abs().mean(0)):
        at = torch.arange(steps.numel(), device=steps.device) % BLOCK
        across, beside = steps[at == BLOCK - 1], steps[(at == BLOCK - 2) | (at == 0)]
        ratios.append(across.mean() / beside.mean().clamp(min=1e-6))
    return torch.minimum(*ratios)


def unchanged_share(pair: Tensor) -> Tensor:
    """The share of the macroblocks of ``pair`` (1, 6, H, W) that its second frame left as they were in the first
    (0-d): an encoder starved of bits skips them, even where the picture under them moved."""
    change = (pair[:, :3].float() - pair[:, 3:6].float()).abs().mean(1, keepdim=True)
    return (F.avg_pool2d(change, MACROBLOCK) < UNCHANGED).float().mean()


def _dct_matrix(device: torch.device) -> Tensor:
    """The orthonormal 8-point DCT-II (rows: frequencies)."""
    k = torch.arange(BLOCK, dtype=torch.float32, device=device)
    m = torch.cos(math.pi * (2 * k[None] + 1) * k[:, None] / (2 * BLOCK)) * math.sqrt(2 / BLOCK)
    m[0] /= math.sqrt(2)
    return m


def _table(rows: tuple[tuple[int, ...], ...], quality: int, device: torch.device) -> Tensor:
    """A standard table at ``quality`` (1-100) as libjpeg scales it."""
    scale = 5000 / quality if quality < 50 else 200 - 2 * quality
    base = torch.tensor(rows, dtype=torch.float32, device=device)
    return ((base * scale + 50) / 100).floor().clamp(1, 255)


def _quantised(plane: Tensor, table: Tensor, dct: Tensor) -> Tensor:
    """``plane`` (N, 1, H, W; H, W multiples of 8; levels 0-255) with each 8x8 block's DCT quantised by ``table``."""
    n, _, h, w = plane.shape
    blocks = (plane - 128).view(n, h // BLOCK, BLOCK, w // BLOCK, BLOCK).transpose(2, 3)
    coefficients = dct @ blocks @ dct.T
    restored = dct.T @ (torch.round(coefficients / table) * table) @ dct
    return restored.transpose(2, 3).reshape(n, 1, h, w) + 128


def round_trip(picture: Tensor, quality: int) -> Tensor:
    """``picture`` (N, 3, H, W, RGB in [0, 1]) encoded and decoded as JPEG at ``quality`` does (its sides padded to
    whole macroblocks by repeating the edge, as an encoder does, and cut back), 8-bit levels."""
    n, _, h, w = picture.shape
    device = picture.device
    pad_h, pad_w = -h % MACROBLOCK, -w % MACROBLOCK
    rgb = F.pad(picture.float(), (0, pad_w, 0, pad_h), mode="replicate") * 255
    r, g, b = rgb.split(1, 1)
    y = luma(rgb)
    cb = 128 - 0.168736 * r - 0.331264 * g + 0.5 * b
    cr = 128 + 0.5 * r - 0.418688 * g - 0.081312 * b
    dct = _dct_matrix(device)
    y = _quantised(y, _table(_LUMA_TABLE, quality, device), dct)
    chroma_table = _table(_CHROMA_TABLE, quality, device)
    cb, cr = (
        F.interpolate(_quantised(F.avg_pool2d(c, 2), chroma_table, dct), scale_factor=2, mode="bilinear")
        for c in (cb, cr)
    )
    out = torch.cat([y + 1.402 * (cr - 128), y - 0.344136 * (cb - 128) - 0.714136 * (cr - 128),
                     y + 1.772 * (cb - 128)], 1)  # fmt: skip
    return (torch.round(out.clamp(0, 255)) / 255)[..., :h, :w].to(picture.dtype)


#: The evidence of a starved codec at the size the net learns at (``StreamCodec``): a grid at least this strong (the
#: benchmark's H.264 streams 1.16-1.61 at CRF 38, every other stream and real clip resized to the learning size
#: 0.87-1.06, tree.avi at its own 320x240 1.31) and at least this share of macroblocks unchanged (the H.264 streams
#: 0.44-0.89, tree.avi at 320x240 0.18).
GRID_EVIDENCE, UNCHANGED_EVIDENCE = 1.15, 0.3
#: A stream read as starved stays so until its grid or its unchanged share falls under these: the running means of the
#: H.264 streams dipped to 1.09 and 0.14 now and then (a decision that came and went with them let the priors go and
#: anchored them again), those of every other stream stayed under a grid of 1.05.
GRID_GONE, UNCHANGED_GONE = 1.08, 0.1
#: How fast ``StreamCodec`` follows the stream (its weight on the newest pair), and every how many pairs it reads its
#: evidence on the host.
READING_WEIGHT, READ_EVERY = 0.1, 10
#: The quality (libjpeg's, 1-100) of the round trip a starved stream's made pairs go through.
MADE_QUALITY = 8


class StreamCodec:
    """Whether the stream reaches the net through a starved block codec (module docstring): running means over its
    pairs of ``grid_strength`` and ``unchanged_share`` (0-d tensors on the pairs' device), read on the host only every
    ``READ_EVERY`` pairs. ``starved``: the last reading's decision (False before the first), taken on the evidence
    above and let go only under the lower ``GRID_GONE`` and ``UNCHANGED_GONE``."""

    def __init__(self) -> None:
        self.grid: Tensor | None = None
        self.unchanged: Tensor | None = None
        self.pairs = 0
        self.starved = False

    def observe(self, pair: Tensor, contiguous: bool = True) -> None:
        """Read ``pair`` (1, 6, H, W: the real pair, RGB in [0, 1]); decide on the host where its turn came.
        ``contiguous``: its frames follow one another in the source. Blocks left unchanged tell an encoder's skips only
        there: over frames the worker skipped between them fewer blocks are left so (a CPU stream that drops half its
        frames let its starved codec go), and a frame paired with itself (a new shot) leaves every block so."""
        grid = grid_strength(pair[:, 3:6])
        if self.grid is None or self.grid.device != pair.device:
            self.grid, self.unchanged = grid, None
        else:
            self.grid = torch.lerp(self.grid, grid, READING_WEIGHT)
        if contiguous:
            unchanged, differs = unchanged_share(pair), (pair[:, :3] != pair[:, 3:6]).any()
            if self.unchanged is None:
                self.unchanged = torch.where(differs, unchanged, 0.0)
            else:
                self.unchanged = torch.lerp(self.unchanged, unchanged, READING_WEIGHT * differs.float())
        self.pairs += 1
        if self.pairs % READ_EVERY == 0 and self.unchanged is not None:
            grid, unchanged = (GRID_GONE, UNCHANGED_GONE) if self.starved else (GRID_EVIDENCE, UNCHANGED_EVIDENCE)
            self.starved = bool((self.grid >= grid) & (self.unchanged >= unchanged))
