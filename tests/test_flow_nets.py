import itertools

import pytest
import torch

from models.flow_loss import flow_loss
from models.flow_nets import FLOW_NETS, ChannelsLastConv2d, CostVolumeMatch, build_flow_net
from models.online import flow_optimizer, frame_pair
from pipeline_core import Pipeline, balance
from pipeline_core.partition import equal_balance, keeps_with_next


@pytest.mark.parametrize("name", sorted(FLOW_NETS))
def test_flow_net_maps_frame_pair_to_full_resolution_flow(name):
    net = build_flow_net(name, init="scratch")
    assert isinstance(net, torch.nn.Sequential) and len(net) >= 8
    out = net(torch.rand(2, 6, 32, 48))
    assert out.shape == (2, 2, 32, 48) and torch.isfinite(out).all()


@pytest.mark.parametrize("name", sorted(FLOW_NETS))
def test_flow_net_splits_at_every_layer_boundary(name):
    torch.manual_seed(0)
    net = build_flow_net(name, init="scratch")
    x = torch.rand(1, 6, 32, 32)
    for cut in range(1, len(net)):
        pipe = Pipeline(net, x, balance=[cut, len(net) - cut], loss_fn=flow_loss)
        results = [pipe.step(x, target=x) for _ in range(3)]
        pipe.close()
        assert results[-1].frame == 1 and results[-1].output.shape == (1, 2, 32, 32)
    one_per_layer = Pipeline(net, x, balance=equal_balance(len(net), len(net)), loss_fn=flow_loss)
    result = [one_per_layer.step(x, target=x) for _ in range(len(net))][-1]
    one_per_layer.close()
    assert result.frame == 0 and result.loss is not None


def test_automatic_balance_never_ends_a_stage_after_a_full_resolution_layer():
    net = build_flow_net("strong", init="scratch")
    kept = [i for i, layer in enumerate(net) if keeps_with_next(layer)]
    assert [(type(net[i]).__name__, getattr(net[i], "factor", None)) for i in kept] == [
        ("PairFeatures", 1),
        ("CostVolumeMatch", 1),
        ("LucasKanadeStep", 1),
        ("LucasKanadeStep", 1),
        ("EdgeAwareFill", None),
        ("StillGate", None),
    ]
    x = torch.rand(1, 6, 32, 32)
    for stages in (2, 4):
        ends = set(itertools.accumulate(balance(net, x, stages, loss_fn=flow_loss)[:-1]))
        assert not ends & {i + 1 for i in kept}


def test_online_learning_reduces_the_loss_on_a_moving_pair():
    """A net from scratch on a pan of (5, 3) px: one of (2, 1) px the still gate's camera motion already takes right
    at the first step, leaving learning nothing to reduce."""
    torch.manual_seed(0)
    image = torch.rand(1, 3, 32, 32)
    image = torch.nn.functional.avg_pool2d(image, 3, 1, 1)  # some spatial correlation
    x = torch.cat([image, torch.roll(image, shifts=(3, 5), dims=(-2, -1))], 1)
    net = build_flow_net("fast", init="scratch")
    opt = flow_optimizer(1e-3)(net.parameters())
    losses = []
    for _ in range(40):
        loss = flow_loss(net(x), x)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0]


def test_unknown_net_and_helpers():
    with pytest.raises(ValueError, match="unknown flow net"):
        build_flow_net("nope")
    import numpy as np

    a = np.zeros((4, 5, 3), np.uint8)
    pair = frame_pair(a, a + 255)
    assert pair.shape == (1, 6, 4, 5) and pair[0, :3].max() == 0 and pair[0, 3:].min() == 1
    with pytest.raises(ValueError):
        frame_pair(a, np.zeros((4, 4, 3), np.uint8))


@pytest.mark.parametrize(("cin", "cout"), [(4, 4), (8, 2), (3, 16)])
def test_channels_last_conv_matches_the_plain_conv(cin, cout):
    """Same output, input gradient and weight gradients as ``nn.Conv2d`` with the same weights; the output keeps the
    default layout (the next op never sees channels-last)."""
    torch.manual_seed(0)
    plain = torch.nn.Conv2d(cin, cout, 3, padding=1)
    fast = ChannelsLastConv2d(cin, cout, 3, padding=1)
    fast.load_state_dict(plain.state_dict())
    x = torch.randn(2, cin, 24, 32)
    grad = torch.randn(2, cout, 24, 32)
    results = []
    for conv in (plain, fast):
        xi = x.clone().requires_grad_()
        out = conv(xi)
        out.backward(grad)
        results.append((out.detach(), xi.grad, conv.weight.grad, conv.bias.grad, out.is_contiguous()))
    for expected, got in zip(*results, strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_local_correlation_peaks_at_the_true_integer_shift():
    from models.correlation import local_correlation

    f0 = torch.nn.functional.normalize(torch.randn(1, 8, 20, 20), dim=1)  # unit length, as the net's features
    f1 = torch.roll(f0, shifts=(1, -2), dims=(-2, -1))  # content moves down 1, left 2: flow (-2, +1)
    cost = local_correlation(f0, f1, radius=3)
    best = cost[0, :, 5:15, 5:15].argmax(0)  # interior: no wrap-around
    k = 7
    assert (best == (1 + 3) * k + (-2 + 3)).all()


def test_local_correlation_gradients_match_autograds_own():
    """The hand-written backward against finite differences (gradcheck) and against autograd through the same
    products written with slices, borders included."""
    import torch.nn.functional as F

    from models.correlation import local_correlation

    torch.manual_seed(0)
    f0, f1 = (torch.randn(1, 3, 6, 7, dtype=torch.double, requires_grad=True) for _ in range(2))
    assert torch.autograd.gradcheck(lambda a, b: local_correlation(a, b, 2), (f0, f1))
    padded = F.pad(f1, [2] * 4, mode="replicate")
    windows = [padded[..., dy : dy + 6, dx : dx + 7] for dy in range(5) for dx in range(5)]
    by_slices = torch.stack([(f0 * window).sum(1) for window in windows], 1)
    cost = local_correlation(f0, f1, 2)
    grad = torch.randn_like(cost)
    torch.testing.assert_close(cost, by_slices)
    expected = torch.autograd.grad(by_slices, (f0, f1), grad)
    torch.testing.assert_close(torch.autograd.grad(cost, (f0, f1), grad), expected)


@pytest.mark.parametrize("width", [4, 0])  # learned channels, or RGB alone (the fast net's full-resolution step)
def test_lucas_kanade_step_recovers_a_subpixel_translation(width):
    from models.flow_loss import warp
    from models.flow_nets import LucasKanadeStep

    torch.manual_seed(1)
    prev = torch.rand(1, 3, 64, 64)
    for _ in range(3):  # a smooth image: the linearisation holds over a pixel
        prev = torch.nn.functional.avg_pool2d(prev, 3, 1, 1, count_include_pad=False)
    true = torch.tensor([0.4, -0.3]).view(1, 2, 1, 1)
    cur = warp(prev, -true.expand(1, 2, 64, 64))  # cur(x) = prev(x - d): content moved by d
    step = LucasKanadeStep(factor=1, width=width, window=7)
    with torch.no_grad():
        step.log_damping.fill_(-20.0)  # the mechanism alone (damping is learned)
        flow = step(torch.cat([torch.zeros(1, 2, 64, 64), prev, cur], 1))[:, :2, 12:-12, 12:-12]
    assert (flow - true).abs().mean() < 0.05


@pytest.mark.parametrize("radius", [1, 3])
def test_a_match_corrects_the_flow_by_at_most_its_search_radius(radius):
    torch.manual_seed(0)
    match = CostVolumeMatch(factor=1, width=4, radius=radius, head=8)
    x = torch.cat([torch.full((1, 2, 16, 16), 3.0), torch.rand(1, 6 + 8, 16, 16)], 1)  # flow 3 px, frames, features
    with torch.no_grad():
        match.log_temperature.fill_(-20.0)  # a flat softmax: the soft-argmax adds nothing
        calm = match(x)[:, :2]
        match.head[-1].bias.fill_(1e3)  # a head gone wild
        wild = match(x)[:, :2]
    torch.testing.assert_close(calm, torch.full_like(calm, 3.0))
    assert (wild - 3.0).abs().max() <= radius + 1e-5
    assert (wild - 3.0).min() > radius - 1e-3  # and it reaches the bound
