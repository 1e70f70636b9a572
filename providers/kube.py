"""kubernetes-asyncio clients built from a cluster credential, and the namespace calls on them.

A client is built in memory for one call scope and closed after it: it never
comes from, or changes, the SDK's global default `Configuration`. The SDK
only reads the CA and a client certificate from files, so they are written to
a private temporary directory (0700, files 0600), read while the `ApiClient`
builds its TLS context, and deleted before the client is used. Every failure
leaves as a `ProviderError` whose reason uses the words of `providers.errors`;
the SDK exception is chained, never quoted, since its text carries headers.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime

import aiohttp
from kubernetes_asyncio.client import ApiClient, Configuration, CoreV1Api, V1Namespace, V1ObjectMeta
from kubernetes_asyncio.client.exceptions import ApiException

from providers.credentials import ClusterCredentials
from providers.errors import PermanentError, ProviderError, for_exception, for_status

DEFAULT_TIMEOUT_S = 10.0
# kubernetes-asyncio reads up to this much per chunk; kept when its session is replaced.
READ_BUFFER_BYTES = 2**21
# A server's Status message is shown to users; a misbehaving server must not flood it.
SERVER_MESSAGE_LIMIT = 200


class AlreadyExists(PermanentError):
    """The API server answered 409: an object of that name exists."""


@dataclass(frozen=True)
class ClusterNamespace:
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    created_at: datetime | None = None


def _write_private(directory: str, name: str, content: str) -> str:
    path = os.path.join(directory, name)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(content)
    return path


def _without_proxy_lookup(client: ApiClient) -> None:
    """The SDK's aiohttp session trusts the environment: every request looks up netrc and
    proxies in a thread pool. Cluster calls never go through a proxy, so the session is
    replaced by one on the same connector (same TLS context) that does not."""
    rest = client.rest_client
    built: aiohttp.ClientSession = rest.pool_manager
    connector = built.connector
    built.detach()
    rest.pool_manager = aiohttp.ClientSession(
        connector=connector, trust_env=False, read_bufsize=READ_BUFFER_BYTES
    )


def build_client(credentials: ClusterCredentials) -> ApiClient:
    """An ApiClient for the credential's cluster; no file of it remains once this returns.

    The caller closes it (or uses `cluster_api`, which does)."""
    configuration = Configuration(host=credentials.server.rstrip("/"))
    if credentials.token is not None:
        configuration.api_key = {"BearerToken": credentials.token}
        configuration.api_key_prefix = {"BearerToken": "Bearer"}
    with tempfile.TemporaryDirectory(prefix="spacedock-kube-") as directory:
        configuration.ssl_ca_cert = _write_private(directory, "ca.crt", credentials.ca_pem)
        if (
            credentials.client_certificate_pem is not None
            and credentials.client_key_pem is not None
        ):
            configuration.cert_file = _write_private(
                directory, "tls.crt", credentials.client_certificate_pem
            )
            configuration.key_file = _write_private(
                directory, "tls.key", credentials.client_key_pem
            )
        # ApiClient.__init__ builds the SSL context: the files are read here, and only here.
        client = ApiClient(configuration)
    # Nothing may read the deleted paths later (the SDK only reads them in __init__).
    configuration.ssl_ca_cert = configuration.cert_file = configuration.key_file = None
    _without_proxy_lookup(client)
    return client


def _server_message(error: ApiException) -> str:
    """The `message` of the Status body the API server sent, if it sent one."""
    body = error.body
    try:
        status = json.loads(body.decode() if isinstance(body, bytes) else body or "")
    except (ValueError, UnicodeDecodeError):
        return ""
    message = status.get("message") if isinstance(status, dict) else None
    return str(message)[:SERVER_MESSAGE_LIMIT] if message else ""


def translate(error: BaseException, timeout_s: float) -> ProviderError:
    """Our error for whatever a cluster call raised."""
    if isinstance(error, ApiException) and isinstance(error.status, int) and error.status > 0:
        message = _server_message(error)
        if error.status == 409:
            return AlreadyExists(f"409 conflict: {message or 'the object already exists'}")
        return for_status(error.status, message)
    return for_exception(error, timeout_s)


@asynccontextmanager
async def cluster_api(
    credentials: ClusterCredentials, timeout_s: float = DEFAULT_TIMEOUT_S
) -> AsyncIterator[CoreV1Api]:
    """CoreV1Api on a fresh client; the whole block must finish within timeout_s, and any
    failure in it leaves as a ProviderError."""
    try:
        client = build_client(credentials)
    except (OSError, ValueError) as unusable:
        # ssl raises SSLError (an OSError) for a CA or key it cannot load.
        raise PermanentError(
            "TLS: the cluster's CA or client certificate cannot be loaded"
        ) from unusable
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
    credentials: ClusterCredentials, timeout_s: float = DEFAULT_TIMEOUT_S
) -> list[ClusterNamespace]:
    async with cluster_api(credentials, timeout_s) as api:
        listed = await api.list_namespace()
    return [_from_cluster(item) for item in listed.items]


async def create_namespace(
    credentials: ClusterCredentials,
    name: str,
    labels: Mapping[str, str],
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> ClusterNamespace:
    """Creates the namespace; AlreadyExists when one of that name is there."""
    body = V1Namespace(metadata=V1ObjectMeta(name=name, labels=dict(labels)))
    async with cluster_api(credentials, timeout_s) as api:
        created = await api.create_namespace(body)
    return _from_cluster(created)
