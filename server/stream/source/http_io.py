"""HTTP(S) sources fetched by the decoder itself, so that the address policy holds on every hop.

FFmpeg's own HTTP client follows redirects, and its HLS demuxer opens the URLs a playlist names, without asking
anyone: a check of the source's host alone would let a public URL lead to 127.0.0.1. So the decoder gives PyAV
``HttpOpener.io_open`` (``av.open(url, io_open=...)``) and every URL FFmpeg opens for the source comes here: the
source, a playlist, its segments and keys. Each one is fetched with httpx, redirects followed by hand: every hop's
host is resolved, all its addresses must pass the ``AddressPolicy``, and the connection goes to a checked address
(no second DNS lookup that could answer differently). Only http and https are followed.
"""

from __future__ import annotations

import io
import ssl
from types import TracebackType

import certifi
import httpx

from ... import errors
from ...errors import SourceError
from .sources import AddressPolicy, check_host, shown_source

HTTP_SCHEMES = ("http", "https")
MAX_REDIRECTS = 5
# FFmpeg's HLS demuxer would reuse its own HTTP connection for the next segment, which custom I/O does not have:
# it aborts the process. One request per playlist and segment instead.
DEMUXER_OPTIONS = {"http_persistent": "0"}


class HttpOpener:
    """One source's HTTP client. Every request opens a connection of its own: a pooled one, keyed by address,
    could carry a request for another host name."""

    def __init__(self, policy: AddressPolicy, open_timeout_s: float, read_timeout_s: float) -> None:
        self.policy = policy
        #: The source's own body's length and media type as its server states them (``Content-Length``, None where
        #: it states none: a live stream; ``Content-Type``, "" where none), once it is open; the playlists and
        #: segments opened after it do not change them.
        self.source_length: int | None = None
        self.source_type = ""
        self._opened = False
        self._client = httpx.Client(
            follow_redirects=False,
            trust_env=False,  # no proxy from the environment: the policy is about where this process connects
            timeout=httpx.Timeout(read_timeout_s, connect=open_timeout_s),
            verify=trusted_authorities(),
            limits=httpx.Limits(max_keepalive_connections=0),
        )

    def io_open(self, url: str, flags: int, options: dict) -> Body:
        """PyAV's ``io_open`` callback. A ``SourceError`` raised here surfaces from the PyAV call that needed it."""
        return self.open(url)

    def open(self, url: str) -> Body:
        """GET ``url``, following redirects hop by hop; the body, or a ``SourceError`` that names the refused hop."""
        target = httpx.URL(url)
        for hop in range(MAX_REDIRECTS + 1):
            try:
                response = self._get(target)
            except SourceError as exc:
                where = f"{shown_source(url)} redirects to {shown_source(str(target))}" if hop else shown_source(url)
                raise SourceError(exc.code, f"{where}: {exc.message}") from exc
            if not response.is_redirect:
                if not self._opened:
                    length = response.headers.get("content-length", "")
                    self.source_length = int(length) if length.isdigit() else None
                    self.source_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
                    self._opened = True
                return Body(response, shown_source(str(target)))
            response.close()
            target = target.join(response.headers["location"])
        raise SourceError(errors.SOURCE_UNREACHABLE, f"{shown_source(url)} redirects more than {MAX_REDIRECTS} times")

    def _get(self, url: httpx.URL) -> httpx.Response:
        if url.scheme not in HTTP_SCHEMES:
            raise SourceError(errors.SCHEME_NOT_ALLOWED, f"only http and https are followed, not {url.scheme!r}")
        addresses, tls = check_host(url.host, self.policy), None
        for address in addresses:  # every one was checked; the first that answers serves
            request = self._client.build_request(
                "GET",
                url.copy_with(host=address),
                headers={"Host": url.netloc.decode("ascii")},
                extensions={"sni_hostname": url.host},  # TLS still verifies the certificate against the name
            )
            try:
                response = self._client.send(request, stream=True)
                break
            except httpx.TransportError as exc:
                tls = tls or tls_problem(exc)
                continue
        else:
            where = url.netloc.decode("ascii")
            raise SourceError(
                errors.SOURCE_UNREACHABLE, f"{where} answers, but {tls}" if tls else f"{where} does not answer"
            )
        if response.status_code in (401, 403):
            response.close()
            raise errors.access_denied(response.status_code, bool(url.username or url.password))
        if response.status_code >= 400:
            response.close()
            code = errors.NOT_FOUND if response.status_code == 404 else errors.SOURCE_UNREACHABLE
            raise SourceError(code, f"the server answered HTTP {response.status_code}")
        return response

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> HttpOpener:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def trusted_authorities() -> ssl.SSLContext:
    """Mozilla's certificate authorities (certifi, httpx's own default) and the machine's: its store, where an admin
    adds a private authority (``update-ca-certificates``), and ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` as OpenSSL reads
    them. httpx alone, with ``trust_env`` off, would trust certifi's only."""
    context = ssl.create_default_context(cafile=certifi.where())
    context.load_default_certs()
    return context


def tls_problem(exc: BaseException) -> str | None:
    """What TLS refused in ``exc``'s chain, in words (a camera's self-signed certificate is the common case), or
    None: a server that answers but is not trusted must not read as one that does not answer."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError):
            return f"its TLS certificate is not trusted ({seen.verify_message})"
        if isinstance(seen, ssl.SSLError):
            return "the TLS handshake with it failed"
        seen = seen.__cause__ or seen.__context__
    return None


class Body(io.RawIOBase):
    """A response body as the file PyAV reads (not seekable). httpx errors become ``OSError``s, which the decoder
    already tells apart: a read timeout (``TimeoutError``) is a stalled source, anything else a broken one."""

    def __init__(self, response: httpx.Response, url: str) -> None:
        self._response = response
        self._url = url
        self._chunks = response.iter_bytes()
        self._pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:
        if not self._pending:
            try:
                self._pending = next(self._chunks, b"")
            except httpx.TimeoutException as exc:
                raise TimeoutError(f"no data from {self._url} within the read timeout") from exc
            except httpx.TransportError as exc:
                raise ConnectionError(f"the connection to {self._url} broke") from exc
        n = min(len(buffer), len(self._pending))
        buffer[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n

    def close(self) -> None:
        self._response.close()
        super().close()
