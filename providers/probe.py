"""The probe hot path: `GET {server}/version` through one shared HTTP session.

Measured on this project's machine: a kubernetes-asyncio `ApiClient` per probe spends most
of its ~1.5 ms CPU building an `SSLContext` from a CA file and looking up proxy
settings. Here one aiohttp session (`trust_env=False`) serves every probe, and
each distinct (CA, client certificate) gets one cached `SSLContext`.
Connections are not kept alive: a cluster is probed once an interval, longer
than any useful keep-alive, and thousands of idle TLS connections would cost
about 300 KiB each. A fresh connection also proves the server still accepts
connections, which is what reachability means.

The API server's address is checked against the deny list (link-local cloud
metadata and the operator's networks) after resolution, inside the resolver the
connection itself uses, so a DNS answer cannot swap in a denied address between
the check and the connect. Redirects are never followed, for the same reason:
the session is a `ClusterSession`, the one kind every cluster call uses. The
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
import json
import ssl
import time
from collections import Counter, OrderedDict
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp
from yarl import URL

from providers.credentials import ClusterCredentials
from providers.errors import PermanentError, ProviderError, for_exception, for_status
from providers.network import (
    ClusterSession,
    IPNetwork,
    TlsContexts,
    cluster_text,
    denied_address,
    server_message,
)

# A /version answer is a few hundred bytes; anything much larger is not an API server.
MAX_BODY_BYTES = 64 * 1024
# gitVersion is short ("v1.31.2-eks-1234abc"); a longer one is cut, as it lands in event reasons.
MAX_VERSION = 64
# How long a host name's resolved (and checked) addresses are reused.
RESOLUTION_TTL_S = 30
# Servers whose last TLS session is kept (a session is a few hundred bytes and keeps its
# context alive: as many as the TLS contexts cached).
TLS_SESSIONS_KEPT = 8192


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


@dataclass
class Handshake:
    """The TLS handshake a probe is about to make: the session it may offer, and the TLS
    object that made it (to read whether it resumed, and the session it got)."""

    offer: ssl.SSLSession | None
    ssl_object: ssl.SSLObject | None = None


# aiohttp hands the context to the event loop, which wraps the connection in the probe's
# task (asyncio and uvloop alike), so the context finds the probe's handshake here.
_handshake: ContextVar[Handshake | None] = ContextVar("spacedock_probe_handshake", default=None)


class ResumingContext(ssl.SSLContext):
    """A cluster's TLS context that offers the session the probe's Handshake carries."""

    def wrap_bio(
        self,
        incoming: ssl.MemoryBIO,
        outgoing: ssl.MemoryBIO,
        server_side: bool = False,
        server_hostname: str | bytes | None = None,
        session: ssl.SSLSession | None = None,
    ) -> ssl.SSLObject:
        handshake = _handshake.get()
        if handshake is not None and session is None:
            session = handshake.offer
        ssl_object = super().wrap_bio(incoming, outgoing, server_side, server_hostname, session)
        if handshake is not None:
            handshake.ssl_object = ssl_object
        return ssl_object


class TlsSessions:
    """The last TLS session per server, with the context whose verification it passed;
    least recently used dropped first."""

    def __init__(self, kept: int = TLS_SESSIONS_KEPT) -> None:
        self._kept = kept
        self._sessions: OrderedDict[tuple[str, int], tuple[ssl.SSLContext, ssl.SSLSession]] = (
            OrderedDict()
        )
        self.handshakes: Counter[str] = Counter()  # "resumed" and "full", after successes

    def __len__(self) -> int:
        return len(self._sessions)

    def offer(self, server: tuple[str, int], context: ssl.SSLContext) -> Handshake:
        kept = self._sessions.get(server)
        if kept is None:
            return Handshake(None)
        verified_by, session = kept
        if verified_by is not context:  # what verification trusts has changed
            del self._sessions[server]
            return Handshake(None)
        self._sessions.move_to_end(server)
        return Handshake(session)

    def succeeded(
        self, server: tuple[str, int], context: ssl.SSLContext, handshake: Handshake
    ) -> None:
        if handshake.ssl_object is None:
            return
        resumed = handshake.ssl_object.session_reused
        self.handshakes["resumed" if resumed else "full"] += 1
        if resumed and handshake.offer is not None:
            # The offered session resumed, so its ticket still works: keep it. Reading the
            # new one would cost about a tenth of a millisecond, as much again as offering
            # it (Python's ssl copies a session through DER, peer certificate included).
            # A ticket the server stops taking (expired, keys rotated) gives a full
            # handshake, whose session is kept then.
            session: ssl.SSLSession | None = handshake.offer
        else:
            session = handshake.ssl_object.session
        if session is None:
            self._sessions.pop(server, None)
            return
        self._sessions[server] = (context, session)
        self._sessions.move_to_end(server)
        if len(self._sessions) > self._kept:
            self._sessions.popitem(last=False)

    def failed(self, server: tuple[str, int]) -> None:
        self._sessions.pop(server, None)


def _git_version(body: bytes) -> str | None:
    try:
        version: Any = json.loads(body).get("gitVersion")
    except (ValueError, AttributeError):
        return None
    if not isinstance(version, str):
        return None
    return cluster_text(version, MAX_VERSION) or None


class VersionProber:
    """Probes API servers with `GET /version`; create it on the event loop that uses it."""

    def __init__(self, timeout_s: float, deny: tuple[IPNetwork, ...] = ()) -> None:
        self.timeout_s = timeout_s
        self.deny = deny
        self.tls = TlsContexts(kind=ResumingContext)
        self.sessions = TlsSessions()
        self._session: ClusterSession | None = None

    def _client(self) -> ClusterSession:
        if self._session is None:
            self._session = ClusterSession(
                self.deny,
                max_body_bytes=MAX_BODY_BYTES,
                connection_limit=0,  # the probe loop bounds concurrency itself
                force_close=True,
                ttl_dns_cache=RESOLUTION_TTL_S,
                headers={"User-Agent": "spacedock-probe", "Accept": "application/json"},
            )
        return self._session

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
        if url.host is not None and (why := denied_address(url.host, self.deny)) is not None:
            raise PermanentError(why)
        context = self.tls.for_credentials(credentials)
        headers = {"Authorization": f"Bearer {credentials.token}"} if credentials.token else None
        server = (url.host or "", url.port or 443)
        handshake = self.sessions.offer(server, context)
        offered = _handshake.set(handshake)
        try:
            async with (
                asyncio.timeout(self.timeout_s),
                self._client().request(
                    "GET",
                    url,
                    headers=headers,
                    ssl=context,
                    timeout=aiohttp.ClientTimeout(total=None),
                ) as response,
            ):
                body = await response.read()
                if response.status != 200:
                    raise for_status(response.status, server_message(body))
            version = _git_version(body)
            if version is None:
                raise PermanentError(
                    "HTTP 200 from the API server without a gitVersion in /version"
                )
        except BaseException:
            self.sessions.failed(server)
            raise
        finally:
            _handshake.reset(offered)
        self.sessions.succeeded(server, context, handshake)
        return version

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def _since(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)
