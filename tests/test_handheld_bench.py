"""``bench.handheld``: real clips as a hand-held camera films them, scored as a real clip."""

import json

import av
import cv2
import numpy as np

from bench import handheld


def picture(seed: int, height: int = 240, width: int = 320) -> np.ndarray:
    rng = np.random.default_rng(seed)
    noise = rng.uniform(0, 255, (height // 8, width // 8, 3)).astype(np.float32)
    return cv2.resize(noise, (width, height), interpolation=cv2.INTER_CUBIC).clip(0, 255).astype(np.uint8)


def test_the_camera_moves_the_window_every_frame_and_keeps_to_the_picture():
    still = [picture(0)] * 30  # a still scene: whatever moves is the camera
    filmed = handheld.handheld_frames(still, np.random.default_rng(1))
    assert len(filmed) == 30 and all(f.shape == (240, 320, 3) for f in filmed)
    grey = [cv2.cvtColor(f, cv2.COLOR_RGB2GRAY).astype(np.float32) for f in filmed]
    shifts = [np.hypot(*cv2.phaseCorrelate(a, b)[0]) for a, b in zip(grey, grey[1:], strict=False)]
    assert 0.3 < np.median(shifts) < 15, shifts  # a hand's pan and shake, not a jump


def test_writes_the_clip_s_scores(tmp_path):
    source = tmp_path / "source.mp4"
    with av.open(str(source), "w") as container:
        stream = container.add_stream("libx264", rate=10)
        stream.width, stream.height, stream.pix_fmt = 320, 240, "yuv420p"
        for i in range(8):
            container.mux(stream.encode(av.VideoFrame.from_ndarray(picture(i // 4), format="rgb24")))
        container.mux(stream.encode(None))
    args = ["--video", str(source), "--frames", "6", "--clips", str(tmp_path / "made"), "--out", str(tmp_path / "out")]
    assert handheld.main(args) == 0
    assert (tmp_path / "made" / "handheld-source.mp4").stat().st_size > 0
    result = json.loads((tmp_path / "out" / "clip-handheld-source.json").read_text())
    assert result["pairs"] == 5 and {"frozen", "adapting", "adapting_d2"} <= set(result["methods"])


def test_skips_without_clips(tmp_path, capsys):
    assert handheld.main(["--video", str(tmp_path / "none.mp4"), "--out", str(tmp_path / "out")]) == 0
    assert "skipped" in capsys.readouterr().out and not (tmp_path / "out").exists()


def test_a_clip_made_from_the_same_record_is_reused_and_made_again_when_it_changes(tmp_path, monkeypatch):
    source = tmp_path / "source.mp4"
    source.write_bytes(b"a source")
    made = []
    monkeypatch.setattr(handheld, "make_clip", lambda s, t, f, seed: made.append((f, seed)) or t.write_bytes(b"clip"))
    target = tmp_path / "made" / "handheld-source.mp4"
    target.parent.mkdir()
    for frames, seed in [(6, 0), (6, 0), (7, 0), (7, 1), (7, 1)]:
        assert handheld.made_clip(source, target, frames, seed) == target
    assert made == [(6, 0), (7, 0), (7, 1)]
    source.write_bytes(b"another source")  # another file under the same name
    handheld.made_clip(source, target, 7, 1)
    assert made[-1] == (7, 1) and len(made) == 4
    target.unlink()  # the clip gone, its record left
    handheld.made_clip(source, target, 7, 1)
    assert len(made) == 5
