import av
import numpy as np
import pytest

from models import streams
from models.flow_loss import warp
from models.online import frame_pair


def _warp_next_onto(stream: streams.Stream, t: int) -> tuple[np.ndarray, np.ndarray]:
    pair = frame_pair(stream.frames[t], stream.frames[t + 1])
    import torch

    flow = torch.from_numpy(stream.flow[t]).permute(2, 0, 1)[None]
    rec = warp(pair[:, 3:], flow)[0].permute(1, 2, 0).numpy()
    return rec, pair[0, :3].permute(1, 2, 0).numpy()


def test_ground_truth_flow_warps_frame_onto_next():
    stream = streams.generate(size=64, frames=12, seed=3, photo="coffee")
    h, w = stream.flow.shape[1:3]
    ys, xs = np.mgrid[0:h, 0:w]
    for t in range(0, 11, 5):
        rec, prev = _warp_next_onto(stream, t)
        err = np.abs(rec - prev).max(axis=-1)
        flow = stream.flow[t]
        # away from borders and from motion boundaries (occlusions), brightness is conserved
        tx, ty = xs + flow[..., 0], ys + flow[..., 1]
        inside = (tx > 1) & (tx < w - 2) & (ty > 1) & (ty < h - 2)
        gx, gy = np.gradient(flow[..., 0]), np.gradient(flow[..., 1])
        smooth = (np.abs(np.stack(gx + gy)).max(axis=0) < 0.2) & (xs > 2) & (ys > 2) & (xs < w - 3) & (ys < h - 3)
        valid = inside & smooth
        assert valid.mean() > 0.5
        assert np.median(err[valid]) < 0.02 and err[valid].mean() < 0.03
        # and the flow matters: zero flow reconstructs much worse where things move
        moving = valid & (np.linalg.norm(flow, axis=-1) > 0.3)
        assert moving.sum() > 100
        zero_err = np.abs(stream.frames[t + 1] / 255.0 - prev).max(axis=-1)
        assert err[moving].mean() < 0.5 * zero_err[moving].mean()


def test_streams_are_deterministic_and_shaped():
    a = streams.generate(size=32, frames=4, seed=1)
    b = streams.generate(size=32, frames=4, seed=1)
    c = streams.generate(size=32, frames=4, seed=2)
    assert a.frames.shape == (4, 32, 32, 3) and a.frames.dtype == np.uint8
    assert a.flow.shape == (3, 32, 32, 2) and a.flow.dtype == np.float32
    assert np.array_equal(a.frames, b.frames) and np.array_equal(a.flow, b.flow)
    assert not np.array_equal(a.frames, c.frames)
    assert np.linalg.norm(a.flow, axis=-1).mean() > 0.1  # it moves


def test_npz_round_trip_and_validation(tmp_path):
    stream = streams.generate(size=32, frames=3, seed=0)
    path = tmp_path / "s.npz"
    streams.save_npz(stream, path)
    loaded = streams.load_npz(path)
    assert np.array_equal(loaded.frames, stream.frames) and np.array_equal(loaded.flow, stream.flow)
    np.savez(tmp_path / "bad.npz", frames=stream.frames, flow=stream.flow[:1])
    with pytest.raises(ValueError, match="flow must be"):
        streams.load_npz(tmp_path / "bad.npz")
    np.savez(tmp_path / "float.npz", frames=stream.frames / 255.0, flow=stream.flow)
    with pytest.raises(ValueError, match="frames must be uint8"):
        streams.load_npz(tmp_path / "float.npz")


@pytest.mark.parametrize("shape", ["T,H,W", "T,H,W,1"])
def test_a_grayscale_stream_loads_as_three_equal_channels(tmp_path, shape):
    stream = streams.generate(size=32, frames=3, seed=0)
    gray = stream.frames[..., 1] if shape == "T,H,W" else stream.frames[..., 1:2]
    np.savez(tmp_path / "gray.npz", frames=gray, flow=stream.flow)
    loaded = streams.load_npz(tmp_path / "gray.npz")
    assert loaded.frames.shape == stream.frames.shape and loaded.frames.dtype == np.uint8
    assert all(np.array_equal(loaded.frames[..., c], stream.frames[..., 1]) for c in range(3))
    assert np.array_equal(loaded.flow, stream.flow)


def test_a_stream_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    """A write that fails midway leaves no file a reader could take for a stream, and no scrap beside it."""
    stream = streams.generate(size=32, frames=3, seed=0)
    path = tmp_path / "s.npz"

    def fails(file, **arrays):
        file.write(b"PK half a zip")
        raise OSError("disk full")

    monkeypatch.setattr(streams.np, "savez_compressed", fails)
    with pytest.raises(OSError, match="disk full"):
        streams.save_npz(stream, path)
    assert list(tmp_path.iterdir()) == []


def test_cli_writes_h264_mp4(tmp_path):
    out = tmp_path / "demo.mp4"
    assert streams.main(["--out", str(out), "--size", "32", "--frames", "6", "--seed", "1"]) == 0
    with av.open(str(out)) as container:
        video = container.streams.video[0]
        assert video.codec_context.name == "h264" and (video.width, video.height) == (32, 32)
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(video)]
    assert len(frames) == 6


def test_cli_rejects_bad_arguments(tmp_path):
    with pytest.raises(SystemExit):
        streams.main(["--out", str(tmp_path / "x.avi")])
    with pytest.raises(SystemExit):
        streams.main(["--out", str(tmp_path / "x.npz"), "--photo", "nope"])
