"""Streams in this process: each stream's work (``StreamWork``) runs here, on the GPU with the fewest streams when
the machine has GPUs (``gpus.py``). The single-machine service; no Ray needed."""

from __future__ import annotations

import socket
from dataclasses import replace

from ..settings import Settings
from ..stream.config import StreamConfig
from ..stream.work import OnFrame, OnNotice, StreamRunner, StreamWork
from .gpus import available_gpus, place


class LocalPlacement:
    """``Placement`` on this machine."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.gpus = available_gpus()
        self.node = socket.gethostname()
        self._streams: dict[str, StreamConfig] = {}  # every stream started here, with the devices it got

    def start(self, sid: str, cfg: StreamConfig, on_frame: OnFrame, on_notice: OnNotice
              ) -> tuple[StreamConfig, StreamRunner]:  # fmt: skip
        cfg = replace(cfg, devices=place(cfg.devices, (c.devices for c in self._streams.values()), self.gpus))
        self._streams[sid] = cfg
        work = StreamWork(sid, cfg, self.settings, self.node, on_frame, on_notice)
        work.start()
        return cfg, work

    def running(self) -> dict[str, StreamConfig]:
        """The streams started here (on a single machine there are no others)."""
        return dict(self._streams)

    def attach(self, sid: str, on_frame: OnFrame, on_notice: OnNotice) -> StreamRunner:
        raise LookupError(f"no stream {sid!r} runs outside this process")

    def forget(self, sid: str) -> None:
        self._streams.pop(sid, None)

    def close(self) -> None:
        pass
