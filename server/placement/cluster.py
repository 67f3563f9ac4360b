"""Streams on a Ray cluster (``overtime serve --ray-address``): ``Placement`` by Ray's scheduler.

Each new stream's work goes into a detached, named ``StreamActor`` that asks for ``--ray-stream-cpus`` CPUs (its
decoder and learner processes) and, where the cluster has GPUs, ``--ray-stream-gpus`` of one (which also places
it on a GPU node; Ray gives the actor that GPU alone). Streams spread over the nodes (Ray's ``SPREAD``), and a node
added takes new streams. The registry (``Registry``, on the head node) holds every stream's configuration, so an API
process finds the streams it did not start.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import ray

from ..settings import Settings
from ..stream.checkpoints import is_url
from ..stream.config import StreamConfig
from ..stream.work import OnFrame, OnNotice, StreamRunner
from .ray_actors import NAMESPACE, REGISTRY, RayStream, Registry, StreamActor, actor_name, first_snapshot
from .room import needs

#: Ray's resource on the head node: the registry lives there.
HEAD = "node:__internal_head__"


class RayPlacement:
    """``Placement`` on the Ray cluster at ``settings.ray_address``; this process becomes one of its drivers."""

    def __init__(self, settings: Settings) -> None:
        # A stream's actor takes these settings to its node: relative paths would mean another folder there.
        self.settings = settings.model_copy(update={
            "media_dir": settings.media_dir.resolve(), "cache_dir": settings.cache_dir.resolve(),
            "checkpoint_dir": settings.checkpoint_dir if is_url(settings.checkpoint_dir)
            else str(Path(settings.checkpoint_dir).resolve()),
        })  # fmt: skip
        if not ray.is_initialized():
            ray.init(address=settings.ray_address, namespace=NAMESPACE, log_to_driver=False)
        self.client = uuid.uuid4().hex  # this API process, among those that watch a stream
        registry = ray.remote(Registry).options(name=REGISTRY, lifetime="detached", get_if_exists=True,
                                                resources={HEAD: 0.001}, num_cpus=0)  # fmt: skip
        self.registry = registry.remote()
        self._actor_class = ray.remote(StreamActor)

    def _resources(self) -> dict[str, Any]:
        s = self.settings
        gpus = s.ray_stream_gpus if ray.cluster_resources().get("GPU", 0) > 0 else 0
        return {"num_cpus": s.ray_stream_cpus, "num_gpus": gpus}

    def start(self, sid: str, cfg: StreamConfig, on_frame: OnFrame, on_notice: OnNotice
              ) -> tuple[StreamConfig, StreamRunner]:  # fmt: skip
        asked = self._resources()
        actor = self._actor_class.options(
            name=actor_name(sid), lifetime="detached", max_restarts=-1, max_concurrency=16,
            scheduling_strategy="SPREAD", **asked,
        ).remote(sid, cfg, self.settings)  # fmt: skip
        ray.get(self.registry.add.remote(sid, cfg))
        return cfg, self._watch(actor, on_frame, on_notice, needs(asked["num_cpus"], asked["num_gpus"]))

    def running(self) -> dict[str, StreamConfig]:
        """Every stream of the cluster, by id."""
        return ray.get(self.registry.all.remote())

    def attach(self, sid: str, on_frame: OnFrame, on_notice: OnNotice) -> StreamRunner:
        """Watch a stream another API process started (its actor goes on as it was); LookupError when its actor is
        gone."""
        try:
            actor = ray.get_actor(actor_name(sid), namespace=NAMESPACE)
        except ValueError as exc:
            raise LookupError(f"no actor for stream {sid}") from exc
        asked = self._resources()  # as this API process would ask: the same settings as the one that started it
        return self._watch(actor, on_frame, on_notice, needs(asked["num_cpus"], asked["num_gpus"]))

    def _watch(self, actor: Any, on_frame: OnFrame, on_notice: OnNotice, wants: dict[str, float]) -> RayStream:
        runner = RayStream(actor, self.client, on_frame, on_notice, first_snapshot(actor, wants), wants)
        runner.start()
        return runner

    def forget(self, sid: str) -> None:
        ray.get(self.registry.remove.remote(sid))

    def close(self) -> None:
        """This API process leaves; the streams go on."""
