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


def test_match_exposure_undoes_a_brightness_step_that_a_mover_does_not_mislead():
    prev = smooth_picture_with_a_textured_square()
    step = torch.tensor([0.04, -0.03, 0.05])[:, None, None]
    cur = prev + step
    cur[:, 10:40, 10:50] = torch.rand(3, 30, 40, generator=torch.Generator().manual_seed(1))  # a mover, a tenth of it
    matched = match_exposure(torch.cat([prev, cur])[None])[0]
    assert torch.equal(matched[:3], prev)
    still = torch.ones(prev.shape[-2:], dtype=torch.bool)
    still[10:40, 10:50] = False
    torch.testing.assert_close(matched[3:, still], prev[:, still])


def test_a_mover_filling_most_of_the_picture_is_no_exposure_step():
    prev = smooth_picture_with_a_textured_square()
    cur = prev.clone()
    cur[:, :, :80] = 0.1  # a dark hand close to the camera covers five eighths of the picture
    matched = match_exposure(torch.cat([prev, cur])[None])[0]
    assert torch.equal(matched[3:], cur)


def test_a_cut_is_no_exposure_step():
    prev = smooth_picture_with_a_textured_square()
    cur = prev - 0.3  # every pixel changes by more than an exposure step would
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
