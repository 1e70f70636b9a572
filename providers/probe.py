"""The probe hot path: `GET {server}/version` on a fresh TLS connection, read by hand.

A probe is the same small request to thousands of servers a minute, so it skips the
general HTTP client: it connects with the event loop's own TLS, writes one fixed request
and parses the answer with httptools (the parser uvicorn serves with). Measured on this
project's machine, aiohttp's request machinery and its happy-eyeballs connect were about a
third of a probe's CPU. Each distinct (CA, client certificate) gets one cached `SSLContext`.
Connections are not kept alive: a cluster is probed once an interval, longer than any
useful keep-alive, and thousands of idle TLS connections would cost about 300 KiB each. A
fresh connection also proves the server still accepts connections, which is what
reachability means.

The API server's address is checked against the deny list (link-local cloud metadata and
the operator's networks) before connecting: an IP literal as written, a host name after it
resolves, and the connection goes to the checked addresses themselves, so a DNS answer
cannot swap in a denied address between the check and the connect. An answer is read once
and never followed: a redirect is a failed probe, a body past 64 KiB is refused while it
arrives, and one timeout covers the connect, the handshake and the whole answer. The
version a cluster reports is cluster-chosen text, cleaned before it is stored.

TLS sessions are resumed (issue 12): the fresh handshake is most of a probe's CPU, and
API servers (Go's TLS) resume TLS 1.3 sessions. After a probe that succeeded, the session
it got is kept for that server (host and port), beside the TLS context that verified it;
the next probe of that server offers it (and keeps offering it while it resumes). A
session is offered only through the same
context, so any change of what verification trusts (CA, client certificate) starts a
full, verified handshake, and the stale session is dropped; so is a server's session
after any failed probe. No connection is held open.
"""

from __future__ import annotations

import asyncio
import functools
import json
import socket
import ssl
import time
from dataclasses import dataclass
from typing import Any, Protocol, cast

import httptools  # type: ignore[import-untyped]
from yarl import URL

from providers.cluster_credentials import ClusterCredentials
from providers.errors import (
    PermanentError,
    ProviderError,
    TemporaryError,
    UnexpectedAnswer,
    for_exception,
    for_status,
)
from providers.kept import Kept
from providers.network import (
    BodyTooLarge,
    DenyingResolver,
    IPNetwork,
    TlsContexts,
    cluster_text,
    denied_address,
    literal_address,
    server_message,
)
from providers.tls_sessions import TLS_SESSIONS_KEPT, ResumingContext, TlsSessions, probe_handshake

# A /version answer is a few hundred bytes; anything much larger is not an API server.
MAX_BODY_BYTES = 64 * 1024


# The status line and headers of an API server's answer fit in a few hundred bytes; more
# (endless headers, huge chunk extensions) is read no further.
MAX_HEAD_BYTES = 16 * 1024


# gitVersion is short ("v1.31.2-eks-1234abc"); a longer one is cut, as it lands in event reasons.
MAX_VERSION = 64


# How long a host name's resolved (and checked) addresses are reused.
RESOLUTION_TTL_S = 30


@dataclass(frozen=True)
class ProbeOutcome:
    """One probe's verdict. `error` is a reason from providers.errors, never SDK text."""

    ok: bool
    latency_ms: float | None
    version: str | None = None
    error: str | None = None


class Prober(Protocol):
    async def probe(self, credentials: ClusterCredentials) -> ProbeOutcome: ...

    async def close(self) -> None: ...


def _git_version(body: bytes) -> str | None:
    try:
        version: Any = json.loads(body).get("gitVersion")
    except (ValueError, AttributeError):
        return None
    if not isinstance(version, str):
        return None
    return cluster_text(version, MAX_VERSION) or None


class VersionAnswer(asyncio.Protocol):
    """One connection of a probe: writes the request once connected, then reads one HTTP/1.1
    answer (status and at most MAX_BODY_BYTES of body) into `answered`."""

    def __init__(self, request: bytes, answered: asyncio.Future[tuple[int, bytes]]) -> None:
        self._request = request
        self.answered = answered
        self._parser = httptools.HttpResponseParser(self)
        self._body: list[bytes] = []
        self._size = 0
        self._received = 0
        self._headers_read = False
        self._framed = False  # a length or chunking was announced: a close before the end is not it
        self._refused: ProviderError | None = None

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # asyncio's and uvloop's TLS transports alike (uvloop's is no WriteTransport subclass)
        cast(asyncio.WriteTransport, transport).write(self._request)

    def data_received(self, data: bytes) -> None:
        if self.answered.done():
            return
        self._received += len(data)
        if self._received > MAX_BODY_BYTES + MAX_HEAD_BYTES:  # framing too counts on the wire
            self._fail(BodyTooLarge(MAX_BODY_BYTES))
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError:  # also what a callback's refusal comes out as
            self._fail(self._refused or UnexpectedAnswer("not an HTTP answer"))
            return
        if not self._headers_read and self._received > MAX_HEAD_BYTES:
            self._fail(UnexpectedAnswer(f"headers longer than {MAX_HEAD_BYTES:,} bytes"))

    def connection_lost(self, exc: Exception | None) -> None:
        if self.answered.done():
            return
        if self._headers_read and exc is None and not self._framed:
            # An answer whose body runs until the close (no length, not chunked).
            self.answered.set_result((self._parser.get_status_code(), b"".join(self._body)))
            return
        when = "before the answer was complete" if self._headers_read else "before it answered"
        self._fail(
            exc or TemporaryError(f"connection failed: the API server closed the connection {when}")
        )

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        self._framed |= name in (b"content-length", b"transfer-encoding")
        announced = name == b"content-length" and value.strip().isdigit()
        if announced and int(value) > MAX_BODY_BYTES:  # refused before it is read
            self._refuse(BodyTooLarge(MAX_BODY_BYTES))

    def on_headers_complete(self) -> None:
        self._headers_read = True

    def on_body(self, body: bytes) -> None:
        self._size += len(body)
        if self._size > MAX_BODY_BYTES:
            self._refuse(BodyTooLarge(MAX_BODY_BYTES))
        self._body.append(body)

    def _refuse(self, why: ProviderError) -> None:
        """Stops the parser; httptools raises its own error, and the reason stays here."""
        self._refused = why
        raise why

    def on_message_complete(self) -> None:
        if not self.answered.done():
            self.answered.set_result((self._parser.get_status_code(), b"".join(self._body)))

    def _fail(self, error: BaseException) -> None:
        if not self.answered.done():
            self.answered.set_exception(error)


class ResolvedAddresses:
    """The addresses a probe may connect to, checked against the deny list (a host name's
    after it resolves, an IP literal's as written) and reused for a while: the probe
    connects to exactly the addresses that passed. An answer is not kept past its TTL, nor
    more of them than servers' TLS sessions."""

    def __init__(self, deny: tuple[IPNetwork, ...], ttl_s: float = RESOLUTION_TTL_S) -> None:
        self._deny = deny
        self._resolver: DenyingResolver | None = None  # made on the loop that resolves
        self._ttl_s = ttl_s
        # (until when, addresses) per (host, port); one per server, as its TLS session.
        self._answers: Kept[tuple[str, int], tuple[float, list[str]]] = Kept(
            TLS_SESSIONS_KEPT, ttl_s
        )

    async def of(self, host: str, port: int) -> list[str]:
        key = (host, port)
        kept = self._answers.get(key)
        now = time.monotonic()
        if kept is not None and kept[0] > now:
            return kept[1]
        addresses = await self._checked(host, port)
        self._answers.put(key, (now + self._ttl_s, addresses))
        return addresses

    async def _checked(self, host: str, port: int) -> list[str]:
        if (why := denied_address(host, self._deny)) is not None:
            raise PermanentError(why)
        if literal_address(host) is not None:
            return [host]
        if self._resolver is None:
            self._resolver = DenyingResolver(self._deny)
        answers = await self._resolver.resolve(host, port, socket.AF_UNSPEC)
        return [answer["host"] for answer in answers]

    async def close(self) -> None:
        if self._resolver is not None:
            await self._resolver.close()


class VersionProber:
    """Probes API servers with `GET /version`; create it on the event loop that uses it."""

    def __init__(self, timeout_s: float, deny: tuple[IPNetwork, ...] = ()) -> None:
        self.timeout_s = timeout_s
        self.deny = deny
        self.tls = TlsContexts(kind=ResumingContext)
        self.sessions = TlsSessions()
        self.addresses = ResolvedAddresses(deny)

    async def probe(self, credentials: ClusterCredentials) -> ProbeOutcome:
        started = time.perf_counter()
        try:
            version = await self._version(credentials)
        except ProviderError as error:
            return ProbeOutcome(False, _since(started), error=error.reason)
        except Exception as error:  # every transport failure becomes a named reason
            return ProbeOutcome(
                False, _since(started), error=for_exception(error, self.timeout_s).reason
            )
        return ProbeOutcome(True, _since(started), version=version)

    async def _version(self, credentials: ClusterCredentials) -> str:
        url = URL(credentials.server + "/version")
        host = url.raw_host or ""
        port = url.port or 443
        if url.scheme != "https" or not host:
            raise PermanentError("the API server address must be an https:// URL")
        context = self.tls.for_credentials(credentials)
        request = _request(url, credentials.token)
        server = (host, port)
        handshake = self.sessions.offer(server, context)
        offered = probe_handshake.set(handshake)
        try:
            async with asyncio.timeout(self.timeout_s):
                status, body = await self._get(host, port, context, request)
            if status != 200:
                raise for_status(status, server_message(body))
            version = _git_version(body)
            if version is None:
                raise PermanentError(
                    "HTTP 200 from the API server without a gitVersion in /version"
                )
        except BaseException:
            self.sessions.failed(server)
            raise
        finally:
            probe_handshake.reset(offered)
        self.sessions.succeeded(server, context, handshake)
        return version

    async def _get(
        self, host: str, port: int, context: ssl.SSLContext, request: bytes
    ) -> tuple[int, bytes]:
        """Connects to the first of the host's checked addresses that accepts, and reads
        the answer to `request`."""
        loop = asyncio.get_running_loop()
        addresses = await self.addresses.of(host, port)
        failure: OSError | None = None
        for address in addresses:
            answered: asyncio.Future[tuple[int, bytes]] = loop.create_future()
            try:
                try:
                    transport, _ = await loop.create_connection(
                        functools.partial(VersionAnswer, request, answered),
                        address,
                        port,
                        ssl=context,
                        server_hostname=host,
                        # Not uvloop's 60 s: its timer holds a given-up handshake's TLS
                        # protocol, with its 256 KiB read buffer, alive until it fires (then
                        # a cycle with its closed transport keeps it for the collector).
                        ssl_handshake_timeout=self.timeout_s,
                    )
                except ssl.SSLError:  # the server answered, with the wrong certificate: no retry
                    raise
                except OSError as unreachable:  # refused, unreachable: the next address
                    failure = unreachable
                    continue
                try:
                    return await answered
                finally:
                    transport.abort()  # no close_notify round: the answer is all we wanted
            finally:
                # A probe given up (its timeout, mid-connect or mid-answer) leaves the future
                # unawaited: cancelled, the close that follows cannot set an exception that
                # nobody retrieves (issue 19).
                if not answered.done():
                    answered.cancel()
        assert failure is not None, "a resolved host has at least one address"
        raise failure

    async def close(self) -> None:
        await self.addresses.close()


def _request(url: URL, token: str | None) -> bytes:
    """The probe's request, whole. A token is checked to hold only what a header may
    carry: it is written into the request as it is."""
    authorization = b""
    if token:
        if not token.isascii() or not token.isprintable():
            raise PermanentError(
                "the credential's token holds characters an HTTP header cannot carry"
            )
        authorization = b"Authorization: Bearer " + token.encode() + b"\r\n"
    host = url.raw_host or ""
    authority = f"[{host}]" if ":" in host else host
    if url.explicit_port:
        authority = f"{authority}:{url.port}"
    return (
        b"GET " + url.raw_path_qs.encode() + b" HTTP/1.1\r\n"
        b"Host: " + authority.encode() + b"\r\n"
        b"User-Agent: spacedock-probe\r\n"
        b"Accept: application/json\r\n" + authorization + b"Connection: close\r\n\r\n"
    )


def _since(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)
