"""Source validation: turn the user's ``source`` string into a ``SourceSpec`` the decoder can open, or refuse it.

Checked here (at request time): the scheme allow-list, ``file:`` paths confined to the media dir, camera
indices, and that URL hosts resolve to addresses the ``AddressPolicy`` allows. The decoder checks again when it
connects, since DNS answers can change: every hop of an http(s) source (``http_io.py``), an RTSP source's host.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

from ... import errors
from ...errors import SourceError

URL_SCHEMES = ("http", "https", "rtsp", "rtsps")
DEMO_FILE = "demo.mp4"


@dataclass(frozen=True)
class AddressPolicy:
    """Which non-public addresses sources may use: none (the default), all, or those inside ``networks``. Public
    unicast addresses are always allowed."""

    allow_all: bool = False
    networks: tuple[IPv4Network | IPv6Network, ...] = ()

    def allows(self, address: IPv4Address | IPv6Address) -> bool:
        public = address.is_global and not address.is_multicast
        return self.allow_all or public or any(address in network for network in self.networks)


@dataclass(frozen=True)
class SourceSpec:
    """What the decoder opens. ``live`` sources reconnect with back-off; files end (or loop)."""

    kind: str  # "file" | "http" (and https) | "rtsp" (and rtsps) | "camera" | "webcam" | "demo"
    target: str  # file path, URL or device path ("" for webcam)
    live: bool
    host: str | None = None  # URL host, re-checked before each connect
    policy: AddressPolicy = AddressPolicy()


def shown_source(source: str) -> str:
    """``source`` as the service shows it (the API, the page, error messages): a URL's password, as an IP camera's
    address carries it (``rtsp://admin:PASSWORD@camera/stream``), replaced by ``***``, so that no viewer of the stream
    learns it. The decoder connects with the URL whole (``SourceSpec.target``)."""
    try:
        parts = urlsplit(source)
        password = parts.password
    except ValueError:  # not a URL that parses: nothing to hide in it
        return source
    if password is None:
        return source
    user, host = parts.netloc.rsplit("@", 1)
    return urlunsplit(parts._replace(netloc=f"{user.split(':', 1)[0]}:***@{host}"))


def parse_source(source: str, media_dir: Path, schemes: set[str], policy: AddressPolicy) -> SourceSpec:
    source = source.strip()
    if source in ("demo", "webcam"):
        _require_scheme(source, schemes)
        if source == "demo":
            return SourceSpec("demo", str(Path(media_dir).resolve() / DEMO_FILE), live=False)
        return SourceSpec("webcam", "", live=True)
    camera = re.fullmatch(r"camera:(\d{1,3})", source)
    if camera:
        _require_scheme("camera", schemes)
        return SourceSpec("camera", f"/dev/video{int(camera.group(1))}", live=True)
    parts = urlsplit(source)
    scheme = parts.scheme.lower()
    if not scheme:
        raise SourceError(errors.BAD_SOURCE, f"source {shown_source(source)!r} is not a URL, camera:N, webcam or demo")
    _require_scheme(scheme, schemes)
    if scheme == "file":
        return SourceSpec("file", str(media_path(unquote(parts.netloc + parts.path), media_dir)), live=False)
    if scheme not in URL_SCHEMES:
        raise SourceError(errors.SCHEME_NOT_ALLOWED, f"scheme {scheme!r} is not supported")
    if not parts.hostname:
        raise SourceError(errors.BAD_SOURCE, f"source {shown_source(source)!r} has no host")
    check_host(parts.hostname, policy, unresolved_ok=True)
    kind = "rtsp" if scheme.startswith("rtsp") else "http"
    return SourceSpec(kind, source, live=True, host=parts.hostname, policy=policy)


def media_path(path: str, media_dir: Path) -> Path:
    """Resolve ``path`` (relative to the media dir, or absolute) and insist it stays inside the media dir."""
    root = Path(media_dir).resolve()
    resolved = (root / path).resolve()  # an absolute ``path`` replaces ``root``; symlinks and .. are resolved
    if not resolved.is_relative_to(root):
        raise SourceError(errors.PATH_OUTSIDE_MEDIA, "file sources must be inside the server's media folder")
    if not resolved.is_file():
        raise SourceError(errors.FILE_NOT_FOUND, f"no file {resolved.relative_to(root)} in the media dir")
    return resolved


def check_host(host: str, policy: AddressPolicy, *, unresolved_ok: bool = False) -> list[str]:
    """Resolve ``host``; its addresses, or a refusal when the policy does not allow one of them."""
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError) as exc:
        if unresolved_ok:
            return []  # the decoder reports it as source_unreachable, like any host that does not answer
        raise SourceError(errors.SOURCE_UNREACHABLE, f"cannot resolve host {host!r}") from exc
    addresses = [info[4][0].split("%")[0] for info in infos]
    for address in map(ipaddress.ip_address, addresses):
        if not policy.allows(address):
            raise SourceError(
                errors.PRIVATE_ADDRESS, f"host {host!r} resolves to non-public address {address}; not allowed"
            )
    return addresses


def _require_scheme(scheme: str, schemes: set[str]) -> None:
    if scheme not in schemes:
        raise SourceError(errors.SCHEME_NOT_ALLOWED, f"source type {scheme!r} is not in the allow-list")
