import torch

from models.exposure import match_exposure
from models.flow_nets import build_flow_net


def smooth_picture_with_a_textured_square(h: int = 96, w: int = 128) -> torch.Tensor:
    """(3, H, W): a flat, gently shaded background (where an intensity change looks like any motion) and a textured
    square (where it does not)."""
    yy, xx = torch.meshgrid(torch.linspace(0, 1, h), torch.linspace(0, 1, w), indexing="ij")
    picture = torch.stack([0.6 + 0.1 * xx, 0.55 + 0.05 * yy, 0.5 + 0 * xx])
    noise = torch.rand(1, 3, h, w, generator=torch.Generator().manual_seed(0))
    texture = torch.nn.functional.avg_pool2d(noise, 3, 1, 1)[0]
    picture[:, 30:70, 40:90] = texture[:, 30:70, 40:90]
    return picture


def shaded_picture_with_a_textured_square(h: int = 96, w: int = 128) -> torch.Tensor:
    """(3, H, W): a background shaded strongly across the picture (where a gain changes the brightness by a different
    amount at every pixel) and the textured square."""
    yy, xx = torch.meshgrid(torch.linspace(0, 1, h), torch.linspace(0, 1, w), indexing="ij")
    picture = torch.stack([0.15 + 0.7 * xx, 0.2 + 0.6 * yy, 0.5 + 0.3 * (xx - yy)])
    picture[:, 30:70, 40:90] = smooth_picture_with_a_textured_square(h, w)[:, 30:70, 40:90]
    return picture


def still_outside(rows: slice, cols: slice, h: int = 96, w: int = 128) -> torch.Tensor:
    still = torch.ones(h, w, dtype=torch.bool)
    still[rows, cols] = False
    return still


def test_match_exposure_undoes_a_brightness_step_that_a_mover_does_not_mislead():
    prev = smooth_picture_with_a_textured_square()
    step = torch.tensor([0.04, -0.03, 0.05])[:, None, None]
    cur = prev + step
    cur[:, 10:40, 10:50] = torch.rand(3, 30, 40, generator=torch.Generator().manual_seed(1))  # a mover, a tenth of it
    matched = match_exposure(torch.cat([prev, cur])[None])[0]
    assert torch.equal(matched[:3], prev)
    still = still_outside(slice(10, 40), slice(10, 50))
    torch.testing.assert_close(matched[3:, still], prev[:, still])


def test_match_exposure_undoes_a_gain_that_a_mover_does_not_mislead():
    prev = shaded_picture_with_a_textured_square()
    cur = (prev * 1.06).clamp(max=1.0)
    cur[:, 10:40, 10:50] = torch.rand(3, 30, 40, generator=torch.Generator().manual_seed(1))
    matched = match_exposure(torch.cat([prev, cur])[None])[0]
    still = still_outside(slice(10, 40), slice(10, 50))
    torch.testing.assert_close(matched[3:, still], prev[:, still], atol=2e-3, rtol=0)


def test_a_textured_pan_is_matched_by_a_shift_at_most():
    """Over a background that brightens ever faster to the right, a pan's differences grow with the brightness, and
    a line through them looks like a gain: the texture shows that it explains the frames no better than the shift."""
    h, w = 96, 128
    xx = torch.linspace(0, 1, w).expand(h, w)
    noise = torch.rand(1, 3, h, w, generator=torch.Generator().manual_seed(2))
    prev = 0.1 + 0.8 * xx**2 + 0.3 * (torch.nn.functional.avg_pool2d(noise, 3, 1, 1)[0] - 0.5)
    cur = prev.roll(6, dims=2)
    change = match_exposure(torch.cat([prev, cur])[None])[0, 3:] - cur
    assert change.flatten(1).std(1).amax() < 1e-6, "the pan was taken for a gain"


def test_a_mover_filling_most_of_the_picture_is_no_exposure_step():
    prev = smooth_picture_with_a_textured_square()
    cur = prev.clone()
    cur[:, :, :80] = 0.1  # a dark hand close to the camera covers five eighths of the picture
    matched = match_exposure(torch.cat([prev, cur])[None])[0]
    assert torch.equal(matched[3:], cur)


def test_a_cut_is_no_exposure_step():
    prev = smooth_picture_with_a_textured_square()
    cur = (prev - 0.3).clamp(min=0.0)  # every pixel changes by more than an exposure step would
    assert torch.equal(match_exposure(torch.cat([prev, cur])[None])[0, 3:], cur)


def test_the_shipped_net_reads_an_exposure_step_as_no_motion():
    """Without the matching, the net moved the flat background by up to 5 px for a step of 0.04 (10 of 255)."""
    net = build_flow_net("fast", init="pretrained").eval()
    picture = smooth_picture_with_a_textured_square()
    with torch.no_grad():
        unchanged = net(torch.cat([picture, picture])[None])
        darker = net(torch.cat([picture, picture - 0.04])[None])
    torch.testing.assert_close(darker, unchanged, atol=1e-4, rtol=0)
    assert unchanged.abs().amax() < 0.1


def test_the_shipped_net_reads_a_gain_as_no_motion():
    """With the shift alone, the net read a gain of 6 % over a shaded background as 1.4 px of motion on average (up to
    3.2 px)."""
    net = build_flow_net("fast", init="pretrained").eval()
    picture = shaded_picture_with_a_textured_square()
    with torch.no_grad():
        brighter = net(torch.cat([picture, (picture * 1.06).clamp(max=1.0)])[None])
    assert brighter.norm(dim=1).amax() < 0.1
