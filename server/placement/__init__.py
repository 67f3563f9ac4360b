"""Where a stream's work runs: in the API process on this machine (``local.py``, on its least-loaded GPU:
``gpus.py``), or in a Ray actor somewhere on a cluster (``cluster.py``, ``ray_actors.py``). The API process sees
either through ``Placement`` and the ``StreamRunner`` it hands over."""

from __future__ import annotations

from typing import Protocol

from ..settings import Settings
from ..stream.config import StreamConfig
from ..stream.work import OnFrame, OnNotice, StreamRunner


class Placement(Protocol):
    def start(self, sid: str, cfg: StreamConfig, on_frame: OnFrame, on_notice: OnNotice
              ) -> tuple[StreamConfig, StreamRunner]:  # fmt: skip
        """Start a stream's work somewhere; its configuration as placed (the devices it got) and its runner."""
        ...

    def running(self) -> dict[str, StreamConfig]:
        """Every stream the placement holds, by id (on a cluster, also those other API processes started)."""
        ...

    def attach(self, sid: str, on_frame: OnFrame, on_notice: OnNotice) -> StreamRunner:
        """Watch a running stream this API process did not start (its work goes on as it was)."""
        ...

    def forget(self, sid: str) -> None:
        """The stream was deleted (its work is stopped)."""
        ...

    def close(self) -> None: ...


def make_placement(settings: Settings) -> Placement:
    """On the Ray cluster at ``settings.ray_address``, else here (Ray is imported only for a cluster)."""
    if settings.ray_address:
        from .cluster import RayPlacement

        return RayPlacement(settings)
    from .local import LocalPlacement

    return LocalPlacement(settings)
