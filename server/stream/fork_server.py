"""The fork server every stream's decoder and learner processes are forked from.

Why a fork server: it is a clean process without threads, so forking it is safe, and it is preloaded with the
decoder's and the learner's modules (torch among them) and what every learner loads at its start
(``learner.preload``), so a stream's process starts in a fraction of a second instead of importing torch for seconds
(spawn). Where there is no fork server: spawn.

This module imports nothing heavy, so that ``overtime serve`` can start the fork server before it imports the API
(which loads torch too): the two imports then run on two cores at once, not one after the other. On 2 CPU cores a
fresh server's first stream so shows its first picture 8.8 s after the server's start instead of 11.2 s (medians;
``bench/results/first-picture.md``).
"""

from __future__ import annotations

import multiprocessing as mp

PRELOAD = ["server.stream.source.decoder", "server.stream.learner.process", "server.stream.learner.preload"]
if "forkserver" in mp.get_all_start_methods():
    CONTEXT = mp.get_context("forkserver")
    CONTEXT.set_forkserver_preload(PRELOAD)
else:  # never fork a process that runs threads (uvicorn, torch)
    CONTEXT = mp.get_context("spawn")


def start() -> None:
    """Start the fork server now, without waiting for its preload (seconds), so that the first stream does not
    wait for it from the start."""
    if CONTEXT.get_start_method() == "forkserver":
        from multiprocessing import forkserver

        forkserver.ensure_running()
