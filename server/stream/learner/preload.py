"""What the fork server loads besides the modules of its processes (``fork_server.PRELOAD``), so that every learner
forked from it starts with it loaded instead of loading it again: loaded in each learner, these took 2.3 s of a warm
stream's first picture on 2 cores (3.7-3.9 s after its request on box.mp4, ``bench.service_clip --quick``); preloaded,
it comes after 0.9-1.6 s (bench/results/service-clip-cpu.md).

- ``torch._dynamo``: ``torch.optim.Optimizer.add_param_group`` imports it at the first optimizer a process makes
  (1.5 s).
- The CPU's compiled loops (``models.cpu_loops.warm``: 0.8 s from Numba's cache). The learner warms them again, for
  free here, where it was not forked from this server (spawn).

Neither starts a thread, so the fork server stays safe to fork."""

from __future__ import annotations

import torch._dynamo  # noqa: F401 - loaded for the forks, see above

from models import cpu_loops

cpu_loops.warm()
