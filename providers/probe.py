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
the check and the connect. Redirects are never followed, for the same reason.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import json
import os
import socket
import ssl
import tempfile
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from yarl import URL

from providers.credentials import ClusterCredentials
from providers.errors import PermanentError, ProviderError, for_exception, for_status

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# Cloud metadata services live here; no API server address may point at them.
LINK_LOCAL: tuple[IPNetwork, ...] = (
    ipaddress.ip_network("169.254.0.0/16"),
    ipaddress.ip_network("fe80::/10"),
)
# A /version answer is a few hundred bytes; anything much larger is not an API server.
MAX_BODY_BYTES = 64 * 1024
MAX_SERVER_MESSAGE = 200
# gitVersion is short ("v1.31.2-eks-1234abc"); a longer one is cut, as it lands in event reasons.
MAX_VERSION = 64
# How long a host name's resolved (and checked) addresses are reused.
RESOLUTION_TTL_S = 30
TLS_CONTEXTS_KEPT = 8192


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


def denied_address(address: str, deny: tuple[IPNetwork, ...]) -> str | None:
    """Why an IP address may not be contacted, if it may not; None for host names."""
    try:
        ip = ipaddress.ip_address(address.strip("[]").split("%", 1)[0])
    except ValueError:
        return None
    mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
    for candidate in (ip, mapped):
        if candidate is None:
            continue
        for network in (*LINK_LOCAL, *deny):
            if candidate.version == network.version and candidate in network:
                return (
                    f"denied: the API server address {candidate} is in the denied network {network}"
                )
    return None


class DenyingResolver(AbstractResolver):
    """Resolves like aiohttp's default resolver, and refuses a host that resolves into a
    denied network. Raising a ProviderError (not an OSError) lets it pass through aiohttp
    unchanged, so the probe reports why instead of a DNS failure."""

    def __init__(self, deny: tuple[IPNetwork, ...]) -> None:
        self._inner = aiohttp.DefaultResolver()
        self._deny = deny

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        answers = await self._inner.resolve(host, port, family)
        for answer in answers:
            if (why := denied_address(answer["host"], self._deny)) is not None:
                raise PermanentError(why)
        return answers

    async def close(self) -> None:
        await self._inner.close()


class TlsContexts:
    """One SSLContext per (CA, client certificate), least recently used dropped first.

    Keys are digests, so the cache holds no key material besides what the
    contexts themselves carry."""

    def __init__(self, kept: int = TLS_CONTEXTS_KEPT) -> None:
        self._kept = kept
        self._contexts: OrderedDict[bytes, ssl.SSLContext] = OrderedDict()

    def __len__(self) -> int:
        return len(self._contexts)

    def for_credentials(self, credentials: ClusterCredentials) -> ssl.SSLContext:
        digest = hashlib.sha256()
        for part in (
            credentials.ca_pem,
            credentials.client_certificate_pem,
            credentials.client_key_pem,
        ):
            digest.update((part or "").encode())
            digest.update(b"\0")
        key = digest.digest()
        context = self._contexts.get(key)
        if context is not None:
            self._contexts.move_to_end(key)
            return context
        context = _build_context(credentials)
        self._contexts[key] = context
        if len(self._contexts) > self._kept:
            self._contexts.popitem(last=False)
        return context


def _build_context(credentials: ClusterCredentials) -> ssl.SSLContext:
    try:
        context = ssl.create_default_context(cadata=credentials.ca_pem)
        if credentials.client_certificate_pem and credentials.client_key_pem:
            _load_client_certificate(
                context, credentials.client_certificate_pem, credentials.client_key_pem
            )
    except (ssl.SSLError, ValueError) as error:
        raise PermanentError(
            "TLS: the CA bundle or client certificate cannot be loaded; check caCert"
        ) from error
    return context


def _load_client_certificate(context: ssl.SSLContext, certificate_pem: str, key_pem: str) -> None:
    """`load_cert_chain` only reads files: the key goes to a private (0600) temp file
    that is unlinked as soon as it has been read."""
    descriptor, path = tempfile.mkstemp(prefix="spacedock-client-", suffix=".pem")
    try:
        with os.fdopen(descriptor, "w") as file:
            file.write(certificate_pem.rstrip("\n") + "\n" + key_pem)
        context.load_cert_chain(path)
    finally:
        os.unlink(path)


def _server_message(body: bytes) -> str:
    """The `message` of a Kubernetes Status body, shortened; empty when there is none."""
    try:
        message = json.loads(body).get("message")
    except (ValueError, AttributeError):
        return ""
    return message[:MAX_SERVER_MESSAGE] if isinstance(message, str) else ""


def _git_version(body: bytes) -> str | None:
    try:
        version: Any = json.loads(body).get("gitVersion")
    except (ValueError, AttributeError):
        return None
    if not isinstance(version, str) or not version.strip():
        return None
    return version.strip()[:MAX_VERSION]


class VersionProber:
    """Probes API servers with `GET /version`; create it on the event loop that uses it."""

    def __init__(self, timeout_s: float, deny: tuple[IPNetwork, ...] = ()) -> None:
        self.timeout_s = timeout_s
        self.deny = deny
        self.tls = TlsContexts()
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(
                limit=0,  # the probe loop bounds concurrency itself
                force_close=True,
                ttl_dns_cache=RESOLUTION_TTL_S,
                resolver=DenyingResolver(self.deny),
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                trust_env=False,
                cookie_jar=aiohttp.DummyCookieJar(),  # clusters never share cookies
                timeout=aiohttp.ClientTimeout(total=None),  # asyncio.timeout below bounds a probe
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
            self._client().get(
                url, headers=headers, ssl=context, allow_redirects=False
            ) as response,
        ):
            body = await response.content.read(MAX_BODY_BYTES)
            if response.status != 200:
                raise for_status(response.status, _server_message(body))
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
