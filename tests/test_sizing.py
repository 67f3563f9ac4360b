"""A stream's sizes and rate follow its source: the picture keeps the source's size (capped), the learning sizes its
aspect ratio (multiples of ``NET_MULTIPLE``), the rate the source's own (capped), never faster than the source."""

from __future__ import annotations

import argparse

import pytest

from models.flow_nets import FLOW_NETS, size_multiple
from server.stream.sizing import (
    FALLBACK_FPS,
    MADE_FOR_PIXELS,
    NET_MULTIPLE,
    LearningSizes,
    display_size,
    fit,
    learning_ladder,
    learning_size,
    made_for_side,
    parse_size,
    picture_for,
    same_shape,
    stream_fps,
)


def test_a_4_3_source_keeps_its_picture_and_learns_at_4_3():
    assert display_size(640, 480, 640) == (640, 480)
    assert display_size(1920, 1440, 640) == (640, 480)
    assert display_size(320, 240, 640) == (320, 240)  # never enlarged
    assert learning_size((640, 480), None, None, 160) == (160, 120)
    ladder = learning_ladder((160, 120), 160)
    assert ladder[0] == (160, 120) and ladder[-1] == (64, 48)
    assert all(w % NET_MULTIPLE == 0 and h % NET_MULTIPLE == 0 and abs(w / h - 4 / 3) < 0.1 for w, h in ladder)
    assert [w for w, _ in ladder] == sorted({w for w, _ in ladder}, reverse=True)  # largest first, no repeats


def test_every_flow_net_takes_the_sides_the_service_picks():
    for name, make in FLOW_NETS.items():
        assert NET_MULTIPLE % size_multiple(make()) == 0, name


def test_wide_portrait_and_odd_sources():
    assert display_size(1920, 1080, 640) == (640, 360)
    assert display_size(1080, 1920, 640) == (360, 640)
    assert display_size(639, 479, 640) == (640, 480)  # even sides, for the video encoders
    assert learning_size((640, 360), None, None, 160) == (160, 88)  # 90 rounded to a multiple of 8
    assert learning_size((64, 64), None, None, 160) == (64, 64)  # never larger than the picture
    assert learning_size((640, 480), 128, None, 160) == (128, 96)  # one side asked: the other keeps the aspect
    assert learning_size((640, 480), None, 96, 160) == (128, 96)
    assert learning_size((640, 480), 128, 128, 160) == (128, 128)  # both asked: as asked


@pytest.mark.parametrize(
    ("picture", "side", "size"),
    [
        ((640, 480), 160, (160, 120)),
        ((1920, 1080), 184, (184, 104)),
        ((640, 272), 216, (216, 88)),
        ((1080, 1920), 184, (104, 184)),
        ((176, 144), 152, (152, 128)),
        ((480, 480), 136, (136, 136)),
        ((64, 48), 64, (64, 48)),
    ],  # fmt: skip
)
def test_the_cpus_learning_size_has_the_pixels_the_nets_were_made_for(picture, side, size):
    assert made_for_side(*picture) == side
    assert fit(*picture, side) == size
    if max(picture) > side:  # no other side comes closer to 160x120's pixels
        near = [fit(*picture, s) for s in (side - NET_MULTIPLE, side + NET_MULTIPLE)]
        assert all(abs(w * h - MADE_FOR_PIXELS) >= abs(size[0] * size[1] - MADE_FOR_PIXELS) for w, h in near)


@pytest.mark.parametrize(
    ("requested", "source", "cap", "expected"),
    [
        (None, 10.0, 30.0, 10.0),  # a 10 fps camera gets a 100 ms budget, never 66.7 ms
        (None, 29.97, 30.0, 29.97),
        (None, 60.0, 30.0, 30.0),  # capped
        (None, None, 30.0, FALLBACK_FPS),  # a source that does not say (a browser webcam)
        (None, 90000.0, 30.0, FALLBACK_FPS),  # a broken header is no rate
        (15.0, 10.0, 30.0, 10.0),  # frames are never duplicated: a faster ΔS would be a budget no frame fills
        (5.0, 29.97, 30.0, 5.0),
        (60.0, None, 30.0, 60.0),
    ],
)
def test_rate(requested, source, cap, expected):
    assert stream_fps(requested, source, cap) == pytest.approx(expected)


def test_a_size_on_a_command_line_is_two_positive_sides_or_one_for_a_square():
    assert parse_size("640x480") == (640, 480) and parse_size("128X96") == (128, 96) and parse_size("128") == (128, 128)
    for bad, words in (("640x", "WIDTHxHEIGHT"), ("big", "WIDTHxHEIGHT"), ("0x480", "positive"), ("-8x8", "positive")):
        with pytest.raises(argparse.ArgumentTypeError, match=words):
            parse_size(bad)


def test_frames_of_the_same_shape_keep_the_picture_and_another_shape_gets_its_own():
    assert same_shape((641, 479), (640, 480)) and same_shape((1280, 720), (426, 240))
    assert not same_shape((640, 480), (1280, 720)) and not same_shape((640, 480), (480, 640))
    assert picture_for((1920, 1080), None, 640) == (640, 360)  # the first frame decides
    assert picture_for((1280, 720), (640, 360), 640) == (640, 360)  # another rendition: scaled to it
    assert picture_for((720, 1280), (640, 360), 640) == (360, 640)  # a phone turned: a picture of its own


def test_the_learning_sizes_follow_the_pictures_shape():
    cpu = LearningSizes(None, False, None, None, True)
    assert cpu.ladder((640, 480))[0] == (160, 120) and cpu.ladder((480, 640))[0] == (120, 160)
    assert LearningSizes(None, True, None, None, True).ladder((480, 640))[0] == (480, 640)  # a GPU: the picture's own
    assert LearningSizes(None, False, 128, None, False).ladder((480, 640)) == ((128, 168),)  # width alone keeps shape
    assert LearningSizes(None, False, 128, 96, False).ladder((480, 640)) == ((128, 96),)  # both: as asked
