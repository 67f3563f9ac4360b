"""The still gate: a flow taken to what the background does where standing still explains the pair as well.

``StillGate``: most of a real camera's picture does not move, and a net's small errors there cost more than the
motion it gets right (a static street camera is nearly all background). Where standing still explains the pair as
well as the estimated flow does (the local photometric error of zero flow is no larger than that of the flow: the
stationary-pixel test of Monodepth2's auto-masking), the flow is gated to zero. Stillness needs evidence as motion
does: inside a flat region (a hand's palm, a wall) any flow explains a small window as well as standing still, so
where the pixel's own window has little texture the test is taken over a wide window instead, which reaches the
region's edges: a palm that moved 17 px kept its motion (it lost a quarter of it to a gate deciding on its own
window alone), a still wall stays still. And only where the frames barely changed: a window whose frames differ
clearly is not still, whatever zero flow explains (a fast mover's imperfect flow often explains it no better). A
mover has no still holes: where the test gates specks inside one (a patch of its texture matched as well by standing
still), the gaps narrower than 9 px close again; a still background is wider than that. The service's net takes
"standing still" as moving with the camera (``follows_camera``): a shaking camera's flat ceiling shares its motion,
which no match inside it can show, and so does a panning camera's flat wall where nothing textured stands still;
where a pan crosses a flat surface the camera's motion is read near the whole picture's translation, as the flow's
most common value there can be the flat surface's zero. Both explanations are judged at the same noise: a warp's
bilinear interpolation averages the current frame's noise, so on a noisy camera's still background the net's
sub-pixel fit of the noise explained the pair better than standing still; the gate puts the averaged noise back
(``with_noise_restored``, the pair's noise read off its best-explained tenth, ``pair_noise``, and as alike in
neighbouring pixels as the pair's difference shows it, ``noise_correlation``) and, as the fill
does, counts as texture only what rises above the noise. Where the camera's motion leaves the picture (a pan's
leaving edge), its warp reads only padding, so there it counts as explaining the pair as well as it does on average
where it lands: a pixel leaving the picture moves with the camera unless a flow of its own, matched inside the
picture, explains it better. The net's own flow there has nothing to match either (pans of real frames: 0.8-4.8 px
off over the leaving pixels, 0.03-0.64 once gated; docs/notebook/2026-11-30-what-leaves-the-picture.md).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .camera_motion import (
    FIT_RADII_PX,
    REACH_PX,
    affine_motion,
    camera_motion,
    picture_translation,
    similarity_motion,
)
from .flow_cleanup import (
    box_mean,
    close_gaps,
    frames_of,
    gradient_magnitude,
    noise_correlation,
    pair_noise,
    scene_scale,
    warp_residual,
    with_noise_restored,
)
from .flow_loss import in_frame_mask

#: A mean gradient of this much over a window (in intensity per pixel) makes its still test half-sure: the fill's
#: texture scale as it starts (``EdgeAwareFill.log_texture``).
STILL_TEXTURE = 0.02


#: The largest camera motion the still gate follows whatever else the picture shows, in px a frame at
#: ``MADE_FOR_SIDE`` and below (as much in the scene at larger sizes): a shake. Larger, a common motion may be a
#: mover filling most of the picture, and following it painted the wall behind one with its motion; the gate then
#: follows it only where nothing textured stands still (``STANDING_SHARE``;
#: docs/models.md#the-still-gate-follows-the-camera).
CAMERA_SHAKE_PX = 1.0

#: The share of the picture's texture (``StillGate``'s ``sure``, where the camera's warp lands in the frame) that must
#: stand still for the gate to take a motion larger than a shake for a mover's, not the camera's: standing still
#: explains it (its residual over the gate's window within ``STANDING_MARGIN`` noise floors) and explains it better
#: than the camera's motion by as much. A door frame on the wall behind a person filling half a webcam's picture
#: holds 0.5-30 % of it; a pan of real frames at most 1 %, and real movers in it, which standing still does not
#: explain either, none (exploratory, docs/models.md#a-pan-is-the-cameras-where-nothing-textured-stands-still).
STANDING_SHARE = 0.02
STANDING_MARGIN = 2.0

#: In a pan the gate follows, by how many noise floors a pixel's own flow must explain its window better than the
#: camera's motion to be kept: within a floor it is the camera's estimate with the noise of a window's fit (blurred
#: pans of 10 px: 0.51 px of error with the flow kept wherever it explained the window at all better, 0.29 with one
#: floor; movers of real texture in such pans within 0.03 px of their error either way; exploratory,
#: docs/models.md#a-pan-is-the-cameras-where-nothing-textured-stands-still).
PAN_EVIDENCE = 1.0

#: By how much of the noise residual (``noise_floor``) the camera's warp must explain the whole picture better than
#: standing still: on a static camera's noisy frames the flow's most common value is a few tenths of a pixel of
#: noise, which with its noise restored explains the picture about as well as standing still (box with noise of 8
#: levels: within 0.7 % of the noise residual, the camera taken in a quarter of the pairs without this evidence).
CAMERA_EVIDENCE = 0.02


#: By how much less (a share of it) the motion near the picture's translation must leave of the most common flow's mean
#: residual to be taken for the camera's (``StillGate._camera``). A textured patch sliding over a smooth photograph
#: wins the translation's phase correlation, and its motion explained a night stream's frames 0.5-6 % better than the
#: background's, which the net had right (the frozen net 1.13x its error over the stream); a pan down a flat bus roof
#: explained them 4-66 % better, most pairs over 12 % (docs/notebook/2026-11-30-where-hand-held-footage-is-lost.md).
#: Nor is it taken where more than ``STANDING_SHARE`` of the texture (``HELD_SHARE`` where it was read so on the pair
#: before) is explained by the most common flow, and better than by it, as a door frame standing still speaks against
#: a pan: on a smoothed night a textured patch's motion won the translation by the margin and was followed as a pan on
#: four pairs in a row (1.4-1.9 px of error where the frozen start had 0.5-0.6), while 5-10 % of the texture moved as
#: the most common flow did (docs/notebook/2026-12-07-the-translation-against-the-backgrounds-texture.md).
TRANSLATION_EVIDENCE = 0.1

#: By how much less (a share of it) a pan's affine map (``affine_motion``: a rolling shutter's shear) must leave of the
#: similarity's mean residual to be taken. Its two extra numbers also fit the net's errors: blurred pans of real frames
#: filmed at one instant left 0.5-1.2 % less under it, and followed as affine maps lost 16-23 % (10-20 px a frame); a
#: rolling shutter's pans left a median 32 % less (docs/notebook/2026-12-02-a-rolling-shutter-shears-the-pan.md).
SHEAR_EVIDENCE = 0.1

#: A pan the gate followed on the pair before goes on being followed while the camera moves as it did then (within
#: ``HELD_CHANGE`` of that motion) and less than ``HELD_SHARE`` of the texture stands still: the standing share that
#: starts a pan (``STANDING_SHARE``) is crossed by a slow textured mover at night, which standing still explains within
#: its noise (a photograph's night stream: 3.5-4.8 % on four pairs in mid-pan, each 0.55-0.64 px of error where the
#: pairs beside them had 0.15-0.21; docs/notebook/2026-12-02-a-pan-held-from-the-pair-before.md). A door frame behind
#: a mover filling the picture is still told from a pan where none was followed before.
#: The same memory holds the camera's reading near the picture's translation (``TRANSLATION_EVIDENCE``): taken on the
#: pair before, it is taken again while the camera moves alike wherever it explains the picture at all better than the
#: flow's most common value. On a repeated pattern a match a period off explains it almost as well, and on a hand-held
#: pan the evidence sat either side of the margin from one pair to the next (a hand-held clip's pair where it fell
#: short: 8.17 -> 6.15 px; docs/notebook/2026-12-02-the-translation-read-from-the-pair-before.md).
HELD_SHARE = 0.1
HELD_CHANGE = 0.5

#: The name of the gate's reading of the camera's motion (``StillGate.readings``).
CAMERA_READING = "camera_motion"

#: The mean absolute difference under which two frames, each channel standardised (its mean taken out, over its
#: deviation), are one picture; the camera's clipping after a gain leaves a little.
SAME_PICTURE = 0.02


def _explains_better(residual: Tensor, than: Tensor, noise: Tensor, by: float = 0.0) -> Tensor:
    """(B, 1, 1, 1): whether the warp that left ``residual`` explains the whole picture better than the one that left
    ``than``, by more than ``CAMERA_EVIDENCE`` of the ``noise`` residual and by ``by`` of what ``than`` leaves."""
    left, before = residual.mean((2, 3), keepdim=True), than.mean((2, 3), keepdim=True)
    return (before - left > CAMERA_EVIDENCE * noise) & (left <= (1 - by) * before)


def _same_picture(a: Tensor, b: Tensor) -> Tensor:
    """(B, 1, 1, 1): whether frames ``a`` and ``b`` (B, 3, H, W) are one picture up to a brightness shift and gain per
    channel: the net brings a pair's current frame to its previous one's exposure (``exposure.match_exposure``), so
    the frame a stream's next pair starts from is the last pair's current one before that. Pairs that do not follow
    one another (a cut, a benchmark's separate pairs) are not."""
    a, b = ((t - t.mean((2, 3), keepdim=True)) / t.std((2, 3), keepdim=True).clamp_min(1e-3) for t in (a, b))
    return (a - b).abs().mean((1, 2, 3), keepdim=True) < SAME_PICTURE


def _mean_where(t: Tensor, mask: Tensor) -> Tensor:
    """(B, 1, 1, 1): the mean of ``t`` (B, 1, H, W) where ``mask`` is 1."""
    return (t * mask).sum((2, 3), keepdim=True) / mask.sum((2, 3), keepdim=True).clamp_min(1.0)


def _beyond_the_frame_as_within(residual: Tensor, lands: Tensor) -> Tensor:
    """``residual`` where the camera's warp ``lands`` in the frame, and its mean there where it leaves: beyond the frame
    the warp reads the padding, which no motion explains."""
    return torch.where(lands > 0, residual, _mean_where(residual, lands))


class StillGate(nn.Module):
    """[flow, frames, ...] -> the same tensor with the flow gated to zero where zero flow explains the pair as well;
    decided over ``window`` where that window has texture, else over ``wide`` (module docstring), and only where the
    frames barely changed over the ``changed`` window; gaps in the kept flow narrower than ``closing`` are closed.

    ``follows_camera``: the background's motion is the camera's (``models.camera_motion``), not zero: the gate then
    tests and gates to that motion, so before a shaking or panning camera a flat wall moves with it (zero before a
    static one, as without; docs/models.md#the-still-gate-follows-the-camera and the section after it).

    It remembers the pair before (``HELD_SHARE``): a pan followed there goes on, and a camera read near the picture's
    translation is read there again, where this pair follows on from it. What it read of the camera's motion, followed
    or not, leaves the net beside the flow (``readings``): the learner's made pairs move as much.

    ``hands_on_keep``: the tensor goes on with the gate's decision appended, (B, 1, H, W) in [0, 1], 1 where the flow
    was kept: a variational refinement after it does not smooth across that boundary (``models.variational``).

    Only what is shown is gated (``pipeline_core.partition.only_shown``): a pair the learner learns from beside the
    one it shows (``models.online.KNOWN_MOTION``) is scored on the flow before the gate, its still background
    counted against the matcher too. Scored after it, learning pushed box's full-resolution match sharper (its
    temperature +1.7 in log) and its consistent moving pixels to 1.021x the frozen start over the clip; before it,
    1.009x, and coffee's streams learned more (clean 0.922x frozen over the last 100 pairs, not 0.930x; flicker
    0.765x, not 0.786x). Its priors then learn nothing online, and what night footage gained from them went too (a
    photograph's night stream 1.004x, was 0.848x): ``docs/notebook/2026-11-29-what-a-learned-pair-needs-of-the-net.md``.
    """

    only_shown = True

    def __init__(
        self,
        window: int = 5,
        wide: int = 31,
        changed: int = 15,
        closing: int = 9,
        follows_camera: bool = False,
        hands_on_keep: bool = False,
    ) -> None:
        super().__init__()
        self.window, self.windows, self.changed, self.closing = window, (window, wide), changed, closing
        self.follows_camera, self.hands_on_keep = follows_camera, hands_on_keep
        # In hundredths of an intensity: an Adam step moves a parameter by about the learning rate whatever its size,
        # which for a margin of 0.001 in intensity units would be a leap. It may turn negative (gate less).
        self.margin = nn.Parameter(torch.tensor(0.1))  # how much better moving must be
        # Width of the gate's transition: about 8-bit video's quantisation step (1/255) averaged over the window's
        # 25 pixels. A width of 0.002 let 27 % of the flow through where moving explained the pair no better than
        # standing still (sigmoid(-margin/width) at no gain), which painted the static background on real clips.
        self.log_softness = nn.Parameter(torch.tensor(0.0005).log())
        # In hundredths too: a ``changed`` window whose frames differ by more than this on average is not still, however
        # well standing still explains it. A fast mover's imperfect flow often explains its pixels no better than zero
        # does; gated, a hand lost part of its motion (tree's fast pixels: EPE 4.7 before the gate, 5.3 after it;
        # docs/models.md#the-still-gate-leaves-changed-places-alone).
        self.quiet = nn.Parameter(torch.tensor(5.0))
        # The pair before (``HELD_SHARE``): 1 where the gate followed a pan, 1 where it read the camera near the
        # picture's translation, the camera's motion then at the scene's scale, and its current frame. What the stream
        # showed, not weights: neither learned nor saved.
        self.register_buffer("followed_pan", torch.zeros(1, 1, 1, 1), persistent=False)
        self.register_buffer("read_translation", torch.zeros(1, 1, 1, 1), persistent=False)
        self.register_buffer("followed_motion", torch.zeros(1, 2, 1, 1), persistent=False)
        self.register_buffer("last_frame", torch.zeros(1, 3, 1, 1), persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        flow, (prev, cur) = x[:, :2], frames_of(x).split(3, 1)
        # The decision reads the flow without differentiating it: the gate's steep edge would send the flow
        # gradients hundreds of times the loss's own (learning from scratch diverged).
        flow_read = flow.detach()
        unwarped = (prev - cur).abs().mean(1, keepdim=True)
        warped = warp_residual(prev, cur, flow_read)
        # A warp interpolates the current frame, which averages its noise away: on a still, noisy window any
        # sub-pixel flow explained the pair better than standing still did (box with noise of 4 levels: its still
        # background painted; docs/models.md#the-still-gate-judges-at-the-same-noise). Every hypothesis is judged
        # with its full noise, and only the gradient above the noise's own is texture.
        correlation = noise_correlation(prev, cur)
        noise = pair_noise(unwarped, warped, flow_read, correlation)
        moved = with_noise_restored(warped, flow_read, noise, correlation)
        texture = (box_mean(gradient_magnitude(prev), self.window) - noise).clamp_min(0) ** 2
        sure = texture / (texture + STILL_TEXTURE**2)
        camera, still = self._background(flow_read, prev, cur, unwarped, noise, correlation, sure)
        margin, softness = self.margin / 100, self.log_softness.exp()
        near, far = (torch.sigmoid((box_mean(still, w) - box_mean(moved, w) - margin) / softness) for w in self.windows)
        quiet = torch.sigmoid((self.quiet / 100 - box_mean(still, self.changed)) / softness)
        keep = close_gaps(1 - quiet * (1 - sure * near - (1 - sure) * far), self.closing)
        gated = flow * keep if camera is None else camera + (flow - camera) * keep
        return torch.cat([gated, x[:, 2:], *([keep.detach()] if self.hands_on_keep else [])], 1)

    def _background(
        self,
        flow: Tensor,
        prev: Tensor,
        cur: Tensor,
        unwarped: Tensor,
        noise: Tensor,
        correlation: Tensor,
        sure: Tensor,
    ) -> tuple[Tensor | None, Tensor]:
        """What standing still means, and how much the frames differ under it per pixel: zero (``unwarped``), or
        (``follows_camera``) the camera's motion where the frames confirm it, warped back by it differing less over
        the whole picture than as they came, at the same noise and by more than ``CAMERA_EVIDENCE``; and, larger
        than a shake (a pan), only where little of the texture ``sure`` stands still (``STANDING_SHARE``), as a
        similarity where that explains the picture better than the translation, as an affine map where that explains
        it better than the similarity by ``SHEAR_EVIDENCE``, and with its residual counted
        ``PAN_EVIDENCE`` noise floors under what it is (a pixel's own flow must beat it by that much). A flow's most
        common value is not evidence enough: a net learning from scratch starts with a bias of a few tenths of a
        pixel everywhere, and a static background gated to it was painted (box: all pixels over the first 30 pairs
        0.019 -> 0.067 px; docs/models.md#the-still-gate-follows-the-camera)."""
        if not self.follows_camera:
            return None, unwarped
        scale = scene_scale(*flow.shape[-2:])
        continues = self._continues(prev)
        camera, along, read_translation = self._camera(flow, prev, cur, noise, correlation, sure, scale, continues)
        confirmed = _explains_better(along, unwarped, noise)
        shake = camera[..., :1, :1].norm(dim=1, keepdim=True) <= CAMERA_SHAKE_PX * scale
        # The texture where the camera's warp lands in the frame (beyond, its residual is the padding's).
        counted = sure * in_frame_mask(camera)
        share, motion = self._standing_share(along, unwarped, noise, counted), camera[..., :1, :1] / scale
        pan_held = self._held(self.followed_pan, continues, motion)
        pan = ~shake & ((share < STANDING_SHARE) | (pan_held & (share < HELD_SHARE)))
        # A hand-held pan turns and zooms a little too (a similarity), and a rolling shutter shears it (an affine map):
        # each fitted from the camera so far, and taken where it explains the picture better.
        radii = tuple(r * scale for r in FIT_RADII_PX)
        for fit, by in ((similarity_motion, 0.0), (affine_motion, SHEAR_EVIDENCE)):
            fitted = fit(flow, camera, counted, radii)
            fitted_along = with_noise_restored(warp_residual(prev, cur, fitted), fitted, noise, correlation)
            takes = pan & _explains_better(fitted_along, along, noise, by)
            camera, along = torch.where(takes, fitted, camera), torch.where(takes, fitted_along, along)
        along = _beyond_the_frame_as_within(along, in_frame_mask(camera))
        follows = confirmed & (shake | pan)
        self._remember(confirmed & pan, read_translation, motion, cur)
        background = along - PAN_EVIDENCE * noise * (confirmed & pan)
        return camera * follows, torch.where(follows, background, unwarped)

    def readings(self) -> dict[str, Tensor]:
        """``CAMERA_READING``: the camera's motion (B, 2, 1, 1, px) read on the last pair, whether or not the gate
        followed it. Where the gate stands the background still (a night camera's shake, whose evidence is within the
        noise), the flow put out no longer shows it (``pipeline_core.stage.Stage.readings``). Nothing without
        ``follows_camera``."""
        if not self.follows_camera:
            return {}
        return {CAMERA_READING: self.followed_motion * scene_scale(*self.last_frame.shape[-2:])}

    def _camera(
        self,
        flow: Tensor,
        prev: Tensor,
        cur: Tensor,
        noise: Tensor,
        correlation: Tensor,
        sure: Tensor,
        scale: float,
        continues: Tensor | None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """(B, 2, H, W), how badly it explains each pixel (``warp_residual``, its ``noise`` restored) and (B, 1, 1, 1)
        whether it was read near the picture's translation: the flow's most common value, or, where the picture's
        translation (``picture_translation``) is larger than a shake and the most common flow near it explains the
        frames better on average where each lands in them, at the same noise and by ``TRANSLATION_EVIDENCE`` (at all,
        where it was read so on the pair before: ``_held``), that one, unless the texture ``sure`` that the most common
        flow explains better speaks against it (``TRANSLATION_EVIDENCE``). A pan across a flat surface leaves the
        net's flow near zero there, which can be the most common; the whole picture's edges still show the pan (a
        hand-held tilt down a bus roof, its first 30 pairs: 1.41 times the better classical method's error over all
        pixels, 1.20 with the translation; docs/notebook/2026-11-30-what-leaves-the-picture.md). At the same noise: a
        warp by a fraction of a pixel averages the frame's noise away. ``scale``: the scene's (``scene_scale``);
        ``continues``: ``_continues``."""
        reach = REACH_PX * scale
        common = camera_motion(flow, reach).expand_as(flow)
        seen = camera_motion(flow, reach, near=picture_translation(prev, cur)).expand_as(flow)
        common_along, seen_along = (
            with_noise_restored(warp_residual(prev, cur, m), m, noise, correlation) for m in (common, seen)
        )
        common_mean = _mean_where(common_along, in_frame_mask(common))
        held = self._held(self.read_translation, continues, seen[:, :, :1, :1] / scale)
        margin = torch.where(held, 0.0, TRANSLATION_EVIDENCE)
        lands = in_frame_mask(seen)
        better = _mean_where(seen_along, lands) < (1 - margin) * common_mean
        # The texture the most common flow explains better speaks against it: a textured mover's won the translation.
        against = self._standing_share(seen_along, common_along, noise, sure * lands)
        few = against < torch.where(held, HELD_SHARE, STANDING_SHARE)
        takes = (seen[:, :, :1, :1].norm(dim=1, keepdim=True) > CAMERA_SHAKE_PX * scale) & better & few
        return torch.where(takes, seen, common), torch.where(takes, seen_along, common_along), takes

    def _continues(self, prev: Tensor) -> Tensor | None:
        """(B, 1, 1, 1): where this pair follows on from the pair before, its previous frame that pair's current one
        (the same stream, one frame on); None before a pair of this size (the memory is made afresh together:
        ``_remember``). Read once a pair, for both of what the gate holds from the pair before."""
        if self.last_frame.shape != prev.shape:
            return None
        return _same_picture(prev, self.last_frame)

    def _held(self, flag: Tensor, continues: Tensor | None, motion: Tensor) -> Tensor:
        """(B, 1, 1, 1): where what ``flag`` (a buffer of the gate's memory) says of the pair before holds for this
        one: it was so then, this pair ``continues`` from it, and the camera's ``motion`` (B, 2, 1, 1, at the scene's
        scale) is within ``HELD_CHANGE`` of its motion then. Nowhere before a pair of this size."""
        if continues is None:
            return torch.zeros_like(motion[:, :1], dtype=torch.bool)
        before = self.followed_motion
        moves_alike = (motion - before).norm(dim=1, keepdim=True) <= HELD_CHANGE * before.norm(dim=1, keepdim=True)
        return (flag > 0) & continues & moves_alike

    def _remember(self, followed: Tensor, read_translation: Tensor, motion: Tensor, cur: Tensor) -> None:
        """Keep whether a pan was ``followed``, whether the camera was read near the picture's translation, the camera's
        ``motion`` and the ``cur`` frame for the next pair, in place (a device graph replays into the same buffers);
        made afresh where the pair's size changed, never in inference mode (the shown pair forwards in it, and an
        inference tensor cannot be written outside it)."""
        if self.last_frame.shape != cur.shape:
            with torch.inference_mode(False):
                self.followed_pan, self.read_translation = cur.new_zeros(followed.shape), cur.new_zeros(followed.shape)
                self.followed_motion, self.last_frame = cur.new_zeros(motion.shape), cur.new_zeros(cur.shape)
        self.followed_pan.copy_(followed)
        self.read_translation.copy_(read_translation)
        self.followed_motion.copy_(motion)
        self.last_frame.copy_(cur.detach())

    def _standing_share(self, along: Tensor, behind: Tensor, noise: Tensor, counted: Tensor) -> Tensor:
        """(B, 1, 1, 1): the share of the texture ``counted`` that the motion that left ``behind`` (standing still's
        residual, or another reading of the background's) explains, and explains better than the camera's motion
        (``along``), by ``STANDING_MARGIN`` noise floors over the gate's window: a door frame behind a mover, not a
        pan, nor a mover in a pan."""
        still = box_mean(behind, self.window)
        stands = (still < STANDING_MARGIN * noise) & (box_mean(along, self.window) > still + STANDING_MARGIN * noise)
        return (counted * stands).mean((2, 3), keepdim=True) / counted.mean((2, 3), keepdim=True).clamp_min(1e-6)
