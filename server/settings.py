"""Service settings: one pydantic-settings model, read from ``OVERTIME_*`` env vars and mirrored by CLI flags."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, IPvAnyNetwork, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from .stream.sizing import NET_MULTIPLE
from .stream.source.sources import AddressPolicy

WEB_DIR = Path(__file__).resolve().parent.parent / "clients" / "web"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="OVERTIME_")

    host: str = Field("127.0.0.1", description="address to bind")
    port: int = Field(8000, ge=0, le=65535, description="port to bind")
    token: str | None = Field(None, description="API token; when set every /api and /ws request needs it")
    media_dir: Path = Field(Path("media"), description="file: sources must live here; the demo video is made here")
    checkpoint_dir: Annotated[str, BeforeValidator(str)] = Field(
        "checkpoints",
        description="one checkpoint per stream name: a folder, or a URL every node of a cluster reaches "
        "(s3://bucket/prefix, gs://..., any fsspec filesystem)",
    )
    cache_dir: Path = Field(
        Path("cache"), description="layer profiles and learning sizes measured before (faster starts; safe to delete)"
    )
    web_dir: Path = Field(WEB_DIR, description="browser client served at / when it exists")
    max_streams: int = Field(4, ge=1, description="more concurrent streams get 429")
    max_upload_mb: float = Field(2048.0, ge=0, description="largest video PUT /api/media takes, in MB (0: none)")
    allowed_schemes: Annotated[list[str], NoDecode] = Field(
        ["http", "https", "rtsp", "rtsps", "file", "camera", "webcam", "demo"], description="source allow-list"
    )
    allow_private: Annotated[bool | list[IPvAnyNetwork], NoDecode] = Field(
        False, description="sources on private, loopback and link-local addresses: all (true) or these CIDR ranges"
    )
    demo_stream: bool = Field(True, description="start a learning stream on the bundled demo at start-up")
    # Per-stream defaults (a POST body may override them).
    fps: float | None = Field(None, gt=0, le=120, description="default frame rate 1/ΔS (none: the source's own)")
    max_fps: float = Field(30.0, gt=0, le=120, description="cap on the default frame rate taken from the source")
    display_side: int = Field(
        640, ge=64, le=1920, description="long side of the picture viewers get, at most (the source's when smaller)"
    )
    learning_side: int | None = Field(
        None,
        ge=16,
        le=1920,
        multiple_of=NET_MULTIPLE,
        description="long side of the largest learning size chosen automatically (none: on CPU about 160x120's pixels "
        "in the picture's aspect ratio, 160 for 4:3 and 184 for 16:9; on a GPU the picture's own)",
    )
    width: int | None = Field(
        None,
        ge=16,
        le=1920,
        multiple_of=NET_MULTIPLE,
        description="default learning width (none: sized by the frame budget)",
    )
    height: int | None = Field(
        None,
        ge=16,
        le=1080,
        multiple_of=NET_MULTIPLE,
        description="default learning height (none: sized by the frame budget)",
    )
    model: str = Field("fast", description="default flow network")
    init: Literal["pretrained", "scratch"] = Field("pretrained", description="default initial weights of a new net")
    stages: int = Field(2, ge=1, le=16, description="default number of pipeline stages D")
    lr: float | None = Field(None, gt=0, description="default Adam lr of every stage (none: by init)")
    gpu_compile: bool = Field(
        False,
        description="on a GPU, also torch.compile each stage (inductor) in the background and switch to it when "
        "ready; the stream learns with CUDA graphs meanwhile, and the compiled kernels are cached under cache_dir. "
        "Off by default: a cold compile takes minutes and the graphs alone already remove the launch cost",
    )
    # Supervision.
    checkpoint_interval_s: float = Field(30.0, gt=0, description="seconds between periodic checkpoints")
    open_timeout_s: float = Field(10.0, gt=0, description="timeout for opening a source")
    read_timeout_s: float = Field(10.0, gt=0, description="a live source silent this long is stalled")
    reconnect_max_s: float = Field(30.0, gt=0, description="cap on the reconnect back-off")
    jpeg_quality: int = Field(80, ge=10, le=100, description="quality of the overlay JPEGs")
    fault_injection: bool = Field(False, description="expose POST /api/streams/{id}/faults (reliability tests only)")
    # A cluster (docs/operations.md#a-cluster).
    ray_address: str | None = Field(
        None, description="join the Ray cluster at this address (host:port); each stream's work runs in a Ray actor"
    )
    ray_stream_cpus: float = Field(2.0, gt=0, description="CPUs a stream asks of a Ray node (decoder and learner)")
    ray_stream_gpus: float = Field(
        0.25, gt=0, le=1, description="the share of a GPU a stream asks on a Ray cluster with GPUs"
    )

    @field_validator("allowed_schemes", mode="before")
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        """``OVERTIME_ALLOWED_SCHEMES=http,https,demo`` as the ``--allowed-schemes`` flag takes it (or a JSON list)."""
        return _split(value)

    @field_validator("allow_private", mode="before")
    @classmethod
    def _switch_or_ranges(cls, value: object) -> object:
        """``true`` / ``false`` as before, or ranges: ``10.0.0.0/8,127.0.0.2/32`` (or a JSON list). No boolean word
        holds a dot, slash, colon or bracket; every address or range does."""
        if isinstance(value, str) and any(c in value for c in "./:["):
            return _split(value)
        return value

    def schemes(self) -> set[str]:
        return {s.strip().lower() for s in self.allowed_schemes if s.strip()}

    def address_policy(self) -> AddressPolicy:
        if isinstance(self.allow_private, bool):
            return AddressPolicy(allow_all=self.allow_private)
        return AddressPolicy(networks=tuple(self.allow_private))


def _split(value: object) -> object:
    """A comma list (blanks dropped) or a JSON list, as env vars and flags give them; anything else as it is."""
    if isinstance(value, str):
        if value.lstrip().startswith("["):
            return json.loads(value)
        return [v.strip() for v in value.split(",") if v.strip()]
    return value
