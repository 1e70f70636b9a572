"""The probe hot path: `GET {server}/version` through one shared HTTP session.

DESIGN.md "Probe cost": a kubernetes-asyncio `ApiClient` per probe spends most
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
"""

from __future__ import annotations

import asyncio
import json
import time
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


class VersionProber:
    """Probes API servers with `GET /version`; create it on the event loop that uses it."""

    def __init__(self, timeout_s: float, deny: tuple[IPNetwork, ...] = ()) -> None:
        self.timeout_s = timeout_s
        self.deny = deny
        self.tls = TlsContexts()
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
        async with (
            asyncio.timeout(self.timeout_s),
            self._client().request(
                "GET", url, headers=headers, ssl=context, timeout=aiohttp.ClientTimeout(total=None)
            ) as response,
        ):
            body = await response.read()
            if response.status != 200:
                raise for_status(response.status, server_message(body))
        version = _git_version(body)
        if version is None:
            raise PermanentError("HTTP 200 from the API server without a gitVersion in /version")
        return version

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def _since(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)
