"""``python -m server.warm_compile``'s refusals, in words and before anything is built. What it runs, the learner's
compiled twin at a size, is ``tests/test_worker.py``'s (the twin of a known-motion learner takes over and learns as
the eager one); its cold and warm seconds on a GPU are ``make warm-gpu``'s output."""

from __future__ import annotations

import pytest
import torch

from server import warm_compile


@pytest.mark.parametrize(
    ("size", "said"), [("640by480", "a size is WIDTHxHEIGHT"), ("x", "a size is WIDTHxHEIGHT"), ("0x480", "positive")]
)
def test_a_size_it_cannot_read_is_refused_in_words(size, said, capsys):
    with pytest.raises(SystemExit) as exit_:
        warm_compile.main(["--size", size, "--device", "cpu"])
    assert exit_.value.code == 2 and said in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
def test_without_a_gpu_the_default_device_is_refused_in_words(capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_:
        warm_compile.main(["--size", "64x48", "--cache-dir", str(tmp_path)])
    assert exit_.value.code == 2 and "no CUDA GPU here" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())  # nothing built
