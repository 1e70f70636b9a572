"""kubernetes-asyncio clients built from a cluster credential, and the namespace calls on them.

A client is built in memory for one call scope and closed after it: it never
comes from, or changes, the SDK's global default `Configuration`. The SDK and
`ssl` read the CA and a client certificate only from files, so they are written
to a private temporary directory (0700, files 0600; in /dev/shm where there is
one), read while the TLS context is built, and deleted before the client sends
anything.

The SDK's own aiohttp session is swapped for one that neither looks up proxy
settings per request (kubernetes-asyncio sets `trust_env=True`: two thread-pool
hops per call) nor resolves names unchecked: it uses the probe's deny-list
resolver, so a cluster call cannot reach cloud metadata or a denied network any
more than a probe can. Every failure leaves as a `ProviderError` whose reason
uses the words of `providers.errors`; the SDK exception is chained, never
quoted, since its text carries response headers.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime

import aiohttp
from kubernetes_asyncio.client import ApiClient, Configuration, CoreV1Api, V1Namespace, V1ObjectMeta
from kubernetes_asyncio.client.exceptions import ApiException
from yarl import URL

from providers.credentials import ClusterCredentials
from providers.errors import PermanentError, ProviderError, for_exception, for_status
from providers.network import (
    DenyingResolver,
    IPNetwork,
    denied_address,
    private_files,
    server_message,
    tls_context,
)

DEFAULT_TIMEOUT_S = 10.0
# kubernetes-asyncio reads up to this much per chunk; kept when its session is replaced.
READ_BUFFER_BYTES = 2**21


class AlreadyExists(PermanentError):
    """The API server answered 409: an object of that name exists."""


@dataclass(frozen=True)
class ClusterNamespace:
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    created_at: datetime | None = None


async def build_client(
    credentials: ClusterCredentials, deny: tuple[IPNetwork, ...] = ()
) -> ApiClient:
    """An ApiClient for the credential's cluster; no file of it remains once this returns.

    The caller closes it (or uses `cluster_api`, which does). Raises PermanentError
    (TLS) for a CA or client certificate that cannot be loaded."""
    configuration = Configuration(host=credentials.server.rstrip("/"))
    if credentials.token is not None:
        configuration.api_key = {"BearerToken": credentials.token}
        configuration.api_key_prefix = {"BearerToken": "Bearer"}
    try:
        tls = tls_context(credentials)
        with private_files(ca=credentials.ca_pem) as paths:
            # ApiClient.__init__ builds a context of its own from the CA file (without
            # one, from the whole system store: 17 ms); its session is replaced below.
            configuration.ssl_ca_cert = paths["ca"]
            client = ApiClient(configuration)
    except (ssl.SSLError, ValueError) as unusable:
        raise PermanentError(
            "TLS: the cluster's CA or client certificate cannot be loaded; check caCert"
        ) from unusable
    configuration.ssl_ca_cert = None
    await client.rest_client.pool_manager.close()  # it never sent a byte
    client.rest_client.pool_manager = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(
            ssl=tls,
            limit=configuration.connection_pool_maxsize,
            resolver=DenyingResolver(deny),
        ),
        trust_env=False,
        cookie_jar=aiohttp.DummyCookieJar(),  # one client per call scope: nothing to remember
        read_bufsize=READ_BUFFER_BYTES,
    )
    return client


def translate(error: BaseException, timeout_s: float) -> ProviderError:
    """Our error for whatever a cluster call raised."""
    if isinstance(error, ApiException) and isinstance(error.status, int) and error.status > 0:
        message = server_message(error.body)
        if error.status == 409:
            return AlreadyExists(f"409 conflict: {message or 'the object already exists'}")
        return for_status(error.status, message)
    return for_exception(error, timeout_s)


@asynccontextmanager
async def cluster_api(
    credentials: ClusterCredentials,
    *,
    deny: tuple[IPNetwork, ...] = (),
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> AsyncIterator[CoreV1Api]:
    """CoreV1Api on a fresh client. The block must finish within timeout_s; any failure in
    it leaves as a ProviderError. An API server in a denied network is never contacted."""
    host = URL(credentials.server).host
    if host is not None and (why := denied_address(host, deny)) is not None:
        raise PermanentError(why)  # an IP literal: the resolver never sees it
    client = await build_client(credentials, deny)
    try:
        async with asyncio.timeout(timeout_s):
            yield CoreV1Api(client)
    except ProviderError:
        raise
    except (ApiException, aiohttp.ClientError, OSError, TimeoutError) as failed:
        raise translate(failed, timeout_s) from failed
    finally:
        await client.close()


def _from_cluster(namespace: V1Namespace) -> ClusterNamespace:
    metadata = namespace.metadata
    created: datetime | None = metadata.creation_timestamp
    return ClusterNamespace(
        name=metadata.name,
        labels=dict(metadata.labels or {}),
        # The SDK's parser gives tzlocal() for "Z" on a UTC host; the API speaks UTC.
        created_at=None if created is None else created.astimezone(UTC),
    )


async def list_namespaces(
    credentials: ClusterCredentials,
    *,
    deny: tuple[IPNetwork, ...] = (),
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> list[ClusterNamespace]:
    async with cluster_api(credentials, deny=deny, timeout_s=timeout_s) as api:
        listed = await api.list_namespace()
    return [_from_cluster(item) for item in listed.items]


async def create_namespace(
    credentials: ClusterCredentials,
    name: str,
    labels: Mapping[str, str],
    *,
    deny: tuple[IPNetwork, ...] = (),
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> ClusterNamespace:
    """Creates the namespace; AlreadyExists when one of that name is there."""
    body = V1Namespace(metadata=V1ObjectMeta(name=name, labels=dict(labels)))
    async with cluster_api(credentials, deny=deny, timeout_s=timeout_s) as api:
        created = await api.create_namespace(body)
    return _from_cluster(created)
