"""The service's fork server hands every process it forks what each learner would otherwise load at its start
(``server.stream.learner.preload``): ``torch._dynamo``, which the learner's first optimizer imports, and the CPU's
compiled loops. Loaded in each learner, they cost a warm stream's first picture 2.3 s of its 3.8 s on 2 cores."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from models.cpu_loops import numba_installed
from server.stream.fork_server import CONTEXT

pytestmark = pytest.mark.realtime

ROOT = Path(__file__).resolve().parent.parent
#: Run in a process of its own: the fork server is one per process, started with the preload of whoever asked first
#: (in the suite, the engine's tests ask with theirs).
PROBE = """
import json, sys
from server.stream.fork_server import CONTEXT

def loaded(out):
    from models import cpu_loops
    loops = None
    if cpu_loops.numba_installed():  # a GPU machine may lack Numba: there the loops are tensor ops
        from models import window_products_numba
        loops = bool(window_products_numba._dots.signatures)
    out.put({"dynamo": "torch._dynamo" in sys.modules, "loops": loops})

if __name__ == "__main__":
    out = CONTEXT.Queue()
    proc = CONTEXT.Process(target=loaded, args=(out,))
    proc.start()
    print(json.dumps(out.get(timeout=60)))
    proc.join(10)
"""


@pytest.mark.skipif(CONTEXT.get_start_method() != "forkserver", reason="no fork server on this platform (spawn)")
def test_a_forked_process_starts_with_dynamo_and_the_cpu_loops_loaded(tmp_path):
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    loops = True if numba_installed() else None
    assert json.loads(done.stdout) == {"dynamo": True, "loops": loops}


def test_the_fork_server_starts_without_torch_in_the_process_that_starts_it():
    """``overtime serve`` starts the fork server before it loads the API, so that the two load torch at once on two
    cores: the module that starts it must load nothing heavy itself."""
    code = "import sys, server.stream.fork_server; print(sorted({'torch', 'numpy', 'av'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr[-2000:]
