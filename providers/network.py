"""The outbound gate: what every connection the server makes on a tenant's say-so goes
through (cluster calls and probes, cloud APIs and a service-account key's token
endpoint, the OIDC issuer's discovery and keys, the Flux manifests), plus TLS contexts
built from a credential, private scratch files, and the cleaning of cluster text.

The deny list keeps those connections from making the server a scanner of its own
network: link-local ranges and the other cloud metadata addresses always, the
unspecified addresses (`0.0.0.0/8` and `::`, which reach this very host) always, plus
the operator's `SPACEDOCK_CLUSTER_DENY_CIDRS`. Loopback stays allowed, since kind and
k3s live there. Addresses are checked in every spelling the system resolver accepts
(and every IPv6 form that embeds an IPv4 address), host names after they resolve;
registration checks with the same function.

An `OutboundSession` never follows a redirect, never uses a proxy (none from the
environment either), refuses a URL with credentials in it, sends every host through
the denying resolver (IP literals included) and refuses a response body beyond its
limit: nobody can steer a call elsewhere, nor make the server read without bound.
`fetch` is the one-call form of it, bounded in time too: the single entry point for any
new kind of outbound URL (a chart or Git source).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import ipaddress
import json
import os
import socket
import ssl
import tempfile
import unicodedata
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from yarl import URL

from providers.cluster_credentials import ClusterCredentials
from providers.errors import PermanentError, UnexpectedAnswer
from providers.kept import Kept

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Cloud metadata services live here; no API server address may point at them: link-local
# (AWS, GCP, Azure, OpenStack at 169.254.169.254), AWS's IPv6 endpoint and Alibaba's.
# The unspecified addresses are no destination, yet connecting to them reaches this host:
# 0.0.0.0/8 ("this network", RFC 1122; Linux routes 0.0.0.0 to the local host) and `::`.
ALWAYS_DENIED: tuple[IPNetwork, ...] = (
    ipaddress.ip_network("169.254.0.0/16"),
    ipaddress.ip_network("fe80::/10"),
    ipaddress.ip_network("fd00:ec2::254/128"),
    ipaddress.ip_network("100.100.100.200/32"),
    ipaddress.ip_network("0.0.0.0/8"),
    ipaddress.ip_network("::/128"),
)
# IPv6 prefixes whose last 32 bits are an IPv4 address that the packets reach: NAT64's
# well-known prefix (RFC 6052) and IPv4-compatible addresses (RFC 4291, deprecated).
NAT64 = ipaddress.ip_network("64:ff9b::/96")
IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
# A server's Status message is shown to users; a misbehaving server must not flood it.
SERVER_MESSAGE_LIMIT = 200
# What a cluster call may read unless told otherwise (SPACEDOCK_CLUSTER_MAX_BODY_BYTES).
DEFAULT_MAX_BODY_BYTES = 4 * 2**20
TLS_CONTEXTS_KEPT = 8192
# A context no cluster used for this long (its space is gone, or its CA changed) is dropped.
TLS_CONTEXT_IDLE_S = 3600.0
# Key files go to memory-backed storage where the system has it: then they never reach a
# disk at all, and creating and removing them costs 0.2 ms instead of 1.6 ms on ext4.
SCRATCH_ROOT = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def literal_address(host: str) -> IPAddress | None:
    """The address a host literal stands for, including IPv4-mapped IPv6 and the legacy
    IPv4 spellings (2852039166, 0xa9.0xfe.0xa9.0xfe, 169.254.43518) the system resolver
    accepts; None for a host name."""
    bare = host.strip("[]").split("%", 1)[0]
    try:
        address = ipaddress.ip_address(bare)
    except ValueError:
        try:
            return ipaddress.IPv4Address(socket.inet_aton(bare))
        except (OSError, ValueError):  # ValueError: an embedded NUL
            return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def address_forms(address: IPAddress) -> tuple[IPAddress, ...]:
    """The address, and each IPv4 address an IPv6 one carries to the network (NAT64,
    IPv4-compatible, 6to4, Teredo's server and client): a deny list must catch them all."""
    if not isinstance(address, ipaddress.IPv6Address):
        return (address,)
    forms: list[IPAddress] = [address]
    if address.ipv4_mapped is not None:
        forms.append(address.ipv4_mapped)
    if address in NAT64 or (address in IPV4_COMPATIBLE and int(address) > 1):
        forms.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    if address.sixtofour is not None:
        forms.append(address.sixtofour)
    if address.teredo is not None:
        forms.extend(address.teredo)
    return tuple(forms)


def denied_address(host: str, deny: tuple[IPNetwork, ...]) -> str | None:
    """Why an address may not be contacted, if it may not; None for host names. The one
    check for registration and connection alike."""
    address = literal_address(host)
    if address is None:
        return None
    for form in address_forms(address):
        for network in (*ALWAYS_DENIED, *deny):
            if form.version == network.version and form in network:
                return f"denied: the address {address} is in the denied network {network}"
    return None


class DenyingResolver(AbstractResolver):
    """Resolves like aiohttp's default resolver, and refuses a host that resolves into a
    denied network. Raising a ProviderError (not an OSError) lets it pass through aiohttp
    unchanged, so the caller reports why instead of a DNS failure."""

    def __init__(self, deny: tuple[IPNetwork, ...]) -> None:
        self._inner = aiohttp.DefaultResolver()
        self._deny = deny

    def check_literal(self, host: str | None) -> None:
        """aiohttp connects to an IP literal without asking any resolver; every request
        passes its host here first, so literals meet the same deny list as names."""
        if host is not None and (why := denied_address(host, self._deny)) is not None:
            raise PermanentError(why)

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


@contextmanager
def private_files(**contents: str) -> Iterator[dict[str, str]]:
    """Writes each content to its own file in a fresh 0700 directory (files 0600), for
    APIs that read keys only from files; everything is deleted when the block ends."""
    with tempfile.TemporaryDirectory(prefix="spacedock-", dir=SCRATCH_ROOT) as directory:
        paths = {}
        for name, content in contents.items():
            path = os.path.join(directory, name)
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "w") as file:
                file.write(content)
            paths[name] = path
        yield paths


def tls_context(
    credentials: ClusterCredentials, kind: type[ssl.SSLContext] = ssl.SSLContext
) -> ssl.SSLContext:
    """A context that trusts only the cluster's CA and presents its client certificate;
    `kind` may be a subclass (the prober's resumes TLS sessions)."""
    try:
        context = kind(ssl.PROTOCOL_TLS_CLIENT)  # verifies the chain and the host name
        context.load_verify_locations(cadata=credentials.ca_pem)
        if credentials.client_certificate_pem and credentials.client_key_pem:
            with private_files(
                cert=credentials.client_certificate_pem, key=credentials.client_key_pem
            ) as paths:
                context.load_cert_chain(paths["cert"], paths["key"])
    except (ssl.SSLError, ValueError) as unusable:
        raise PermanentError(
            "TLS: the cluster's CA or client certificate cannot be loaded; check caCert"
        ) from unusable
    return context


class TlsContexts:
    """One SSLContext per (CA, client certificate), least recently used dropped first, and
    none unused for TLS_CONTEXT_IDLE_S.

    Keys are digests, so the cache holds no key material besides what the
    contexts themselves carry."""

    def __init__(
        self, kept: int = TLS_CONTEXTS_KEPT, kind: type[ssl.SSLContext] = ssl.SSLContext
    ) -> None:
        self._kind = kind
        self._contexts: Kept[bytes, ssl.SSLContext] = Kept(kept, TLS_CONTEXT_IDLE_S)

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
        if context is None:
            context = tls_context(credentials, self._kind)
            self._contexts.put(key, context)
        return context


class BodyTooLarge(UnexpectedAnswer):
    """The cluster sent (or announced) more than the call may read."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"too large, more than {limit:,} bytes (SPACEDOCK_CLUSTER_MAX_BODY_BYTES)")


class BoundedResponse(aiohttp.ClientResponse):
    """Reads at most `limit` bytes of body; `read`, `text` and `json` all go through it, so
    no caller (ours or the SDK's) can be made to buffer more."""

    limit: ClassVar[int] = DEFAULT_MAX_BODY_BYTES

    async def read(self) -> bytes:
        if self._body is None:
            try:
                if self.content_length is not None and self.content_length > self.limit:
                    raise BodyTooLarge(self.limit)
                chunks: list[bytes] = []
                size = 0
                while chunk := await self.content.read(2**16):
                    size += len(chunk)
                    if size > self.limit:
                        raise BodyTooLarge(self.limit)
                    chunks.append(chunk)
                self._body = b"".join(chunks)
            except BaseException:
                self.close()
                raise
        return await super().read()


@functools.cache
def _bounded_response(limit: int) -> type[BoundedResponse]:
    return type(f"BoundedResponse{limit}", (BoundedResponse,), {"limit": limit})


class OutboundSession:
    """The HTTP session every outbound call but the probe uses (kubernetes-asyncio's for
    cluster calls, `fetch` for the rest). The probe reads its one small answer itself
    (providers/probe.py), with the same deny list, body bound and no redirects.

    It has only what those callers need (`request`, `close`), so nothing can reach
    the aiohttp session underneath and ask it to follow a redirect or use a proxy."""

    def __init__(
        self,
        deny: tuple[IPNetwork, ...],
        *,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        ssl_context: ssl.SSLContext | None = None,
        connection_limit: int = 100,
        read_bufsize: int = 2**16,
    ) -> None:
        self._resolver = DenyingResolver(deny)
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(
                ssl=ssl_context if ssl_context is not None else True,
                limit=connection_limit,
                resolver=self._resolver,
            ),
            # No proxy from the environment: a proxy would make the connection, with its
            # own resolver, and the deny list would never see where the call goes.
            trust_env=False,
            cookie_jar=aiohttp.DummyCookieJar(),  # outbound calls never share cookies
            response_class=_bounded_response(max_body_bytes),
            read_bufsize=read_bufsize,
        )

    def request(self, method: str, url: str | URL, **options: Any) -> Any:
        """aiohttp's request (awaitable, or an async context manager), without redirects.

        A 3xx comes back as the answer; its Location is never contacted."""
        if options.get("proxy") is not None:
            raise PermanentError("proxies are not used for outbound calls")
        target = URL(url)
        if target.scheme not in ("http", "https") or not target.host:
            raise PermanentError("an outbound call needs an http:// or https:// URL with a host")
        if target.user is not None or target.password is not None:
            raise PermanentError("an outbound URL must not carry credentials (user@host)")
        options["allow_redirects"] = False
        self._resolver.check_literal(target.host)
        return self._session.request(method, target, **options)

    async def close(self) -> None:
        await self._session.close()


@dataclass(frozen=True)
class Fetched:
    """One outbound answer, read whole (within its bound)."""

    status: int
    headers: Mapping[str, str]  # case-insensitive
    body: bytes


async def fetch(
    deny: tuple[IPNetwork, ...],
    method: str,
    url: str,
    *,
    max_body_bytes: int,
    timeout_s: float,
    headers: Mapping[str, str] | None = None,
    data: bytes | None = None,
    ssl_context: ssl.SSLContext | None = None,
) -> Fetched:
    """One outbound HTTP call through the gate, bounded in time (connect, TLS and the
    whole answer within `timeout_s`) and size. A 3xx is the answer: no redirect is
    followed (a hop could lead anywhere the gate was not asked about).

    A refused address, URL or body is a ProviderError; a transport failure stays
    aiohttp's (or TimeoutError), for the caller to name what it was doing. Without
    `ssl_context`, TLS trusts the system's store as it was when aiohttp was imported."""
    session = OutboundSession(deny, max_body_bytes=max_body_bytes, ssl_context=ssl_context)
    try:
        async with (
            asyncio.timeout(timeout_s),
            session.request(method, url, headers=headers, data=data) as response,
        ):
            return Fetched(response.status, response.headers, await response.read())
    except BodyTooLarge:
        raise PermanentError(f"the answer is larger than {max_body_bytes:,} bytes") from None
    finally:
        await session.close()


# Characters that move the cursor, end a line or reorder text: a cluster must not be
# able to forge a log line or disguise a message with them.
_INVISIBLE = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def cluster_text(text: str, limit: int = SERVER_MESSAGE_LIMIT) -> str:
    """Text a cluster chose (a Status message, a version), safe for a log line, a stored
    row or a response: control and format characters become spaces, and it is cut to
    `limit` characters (with an ellipsis)."""
    cleaned = "".join(
        " " if unicodedata.category(c) in _INVISIBLE else c for c in text[: limit * 4]
    )
    cleaned = " ".join(cleaned.split())
    return cleaned if len(cleaned) <= limit else cleaned[: limit - 1] + "…"


def server_message(body: bytes | str | None) -> str:
    """The `message` of a Kubernetes Status body, cleaned and shortened; empty when there
    is none."""
    try:
        status = json.loads(body or "")
    except (ValueError, UnicodeDecodeError, RecursionError):
        return ""
    message = status.get("message") if isinstance(status, dict) else None
    return cluster_text(message) if isinstance(message, str) else ""
