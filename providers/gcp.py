"""GCP: GKE discovery on the Container API with an OAuth access token from google-auth.

An account is a service-account key file (google-auth signs a JWT and exchanges
it at the key's `token_uri`) or, for the platform's own org, application
default credentials ("ambient"). The access token, scope cloud-platform, is
also the bearer token GKE accepts. The Container API's base URL comes from
`SPACEDOCK_GCP_CONTAINER_ENDPOINT` (default Google's).

A key's `token_uri` is the tenant's to choose, so google-auth makes its token
exchange through `GatedRequest`, a transport of ours whose every request goes
through the outbound gate on the event loop: the deny list sees the address the
connection really goes to, not a name checked beforehand that could resolve
differently later. Ambient credentials keep google-auth's own transport: their
endpoints (on GCE the metadata server) are the server's own environment's.
"""

from __future__ import annotations

import asyncio
import base64
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import google.auth
import google.auth.exceptions
import google.auth.transport
import google.auth.transport.requests
from google.oauth2 import service_account

from providers.clouds import (
    CONNECT_TIMEOUT_S,
    MAX_BODY_BYTES,
    READ_TIMEOUT_S,
    CloudAnswer,
    CloudCluster,
    ClusterLocation,
    cloud_json,
    refused,
    retry_throttled,
    scrub,
    secret_values,
)
from providers.cluster_credentials import ClusterCredentials
from providers.errors import PermanentError, ProviderError, TemporaryError
from providers.network import Fetched, IPNetwork, fetch

SCOPE = "https://www.googleapis.com/auth/cloud-platform"
DEFAULT_ENDPOINT = "https://container.googleapis.com"
SELF_LINK_PROJECT = re.compile(r"/projects/([^/]+)/")
# Google's access tokens last an hour; without an expiry we assume a short one.
FALLBACK_LIFETIME = timedelta(minutes=30)


def container_endpoint() -> str:
    return (os.environ.get("SPACEDOCK_GCP_CONTAINER_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


class _BoundedRequest(google.auth.transport.requests.Request):
    """google-auth's transport with our read timeout instead of its two minutes (ambient
    credentials only)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("timeout", READ_TIMEOUT_S)
        return super().__call__(*args, **kwargs)


@dataclass(frozen=True)
class _GatedResponse(google.auth.transport.Response):
    fetched: Fetched

    @property
    def status(self) -> int:
        return self.fetched.status

    @property
    def headers(self) -> Mapping[str, str]:
        return self.fetched.headers

    @property
    def data(self) -> bytes:
        return self.fetched.body


class GatedRequest(google.auth.transport.Request):
    """google-auth's transport interface, served by the outbound gate on `loop` (google-auth
    calls it from the worker thread that signs the assertion)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, deny: tuple[IPNetwork, ...]) -> None:
        self._loop = loop
        self._deny = deny

    def __call__(
        self,
        url: str,
        method: str = "GET",
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
        **_options: Any,
    ) -> google.auth.transport.Response:
        call = fetch(
            self._deny,
            method,
            url,
            headers=headers,
            data=body,
            max_body_bytes=MAX_BODY_BYTES,
            timeout_s=CONNECT_TIMEOUT_S + READ_TIMEOUT_S,
        )
        try:
            return _GatedResponse(asyncio.run_coroutine_threadsafe(call, self._loop).result())
        except (aiohttp.ClientError, TimeoutError) as error:
            raise google.auth.exceptions.TransportError(type(error).__name__) from error


def _refreshed(credentials: Mapping[str, Any], request: GatedRequest) -> tuple[str, datetime]:
    """An access token and its expiry (blocking: runs in a worker thread)."""
    try:
        if credentials.get("ambient"):
            google_credentials, _ = google.auth.default(scopes=[SCOPE])
            google_credentials.refresh(_BoundedRequest())
        else:
            google_credentials = service_account.Credentials.from_service_account_info(
                credentials["serviceAccountJson"], scopes=[SCOPE]
            )
            google_credentials.refresh(request)
    except ProviderError as refused:  # the gate refused the key's token_uri
        raise PermanentError(
            f"the service account key's token_uri cannot be used: {refused.reason}"
        ) from refused
    except google.auth.exceptions.DefaultCredentialsError as error:
        raise PermanentError(
            "no application default credentials in the server's environment (ambient)"
        ) from error
    except google.auth.exceptions.RefreshError as error:
        said = str(error.args[0]) if error.args else "refused"
        raise PermanentError(
            f"Google refused the service account's token request: {_scrubbed(said, credentials)}"
        ) from error
    except google.auth.exceptions.TransportError as error:
        raise TemporaryError(
            "connection failed: Google's token endpoint cannot be reached"
        ) from error
    except (ValueError, KeyError, TypeError) as error:
        # google-auth signs RS256 only: another key type fails inside its signer.
        raise PermanentError(
            "the service account key cannot be used (its private_key must be an RSA key)"
        ) from error
    expiry = google_credentials.expiry
    expires_at = (
        expiry.replace(tzinfo=UTC) if expiry is not None else datetime.now(UTC) + FALLBACK_LIFETIME
    )
    return str(google_credentials.token), expires_at


def _scrubbed(message: str, credentials: Mapping[str, Any]) -> str:
    return scrub(message, secret_values(credentials))


async def _token(
    credentials: Mapping[str, Any], deny: tuple[IPNetwork, ...]
) -> tuple[str, datetime]:
    request = GatedRequest(asyncio.get_running_loop(), deny)
    return await asyncio.to_thread(_refreshed, credentials, request)


def _message(answer: CloudAnswer) -> str:
    error = answer.body.get("error")
    if isinstance(error, dict):
        return str(error.get("message") or error.get("status") or "")
    return ""


async def _get(
    deny: tuple[IPNetwork, ...],
    credentials: Mapping[str, Any],
    path: str,
    doing: str,
    token: str | None = None,
) -> CloudAnswer | None:
    """GET on the Container API (with `token`, else a fresh one); None on 404."""
    secrets = secret_values(credentials)

    async def call() -> CloudAnswer:
        bearer = token or (await _token(credentials, deny))[0]
        url = f"{container_endpoint()}{path}"
        return await cloud_json(deny, "GET", url, bearer, doing, secrets)

    answer = await retry_throttled(call, doing)
    if answer.status == 404:
        return None
    if answer.status != 200:
        raise refused(answer, doing, _message(answer), secrets)
    return answer


def _cluster(found: Mapping[str, Any], project: str) -> CloudCluster:
    """A GKE cluster of `project` (the one asked; its selfLink names it too)."""
    endpoint = found.get("endpoint")
    linked = SELF_LINK_PROJECT.search(str(found.get("selfLink", "")))
    return CloudCluster(
        name=str(found["name"]),
        region=str(found.get("location") or found.get("zone") or ""),
        endpoint=f"https://{endpoint}" if endpoint else None,
        version=found.get("currentMasterVersion"),
        project_id=linked.group(1) if linked else project,
    )


class GcpAdapter:
    def __init__(self, deny: tuple[IPNetwork, ...]) -> None:
        self._deny = deny

    async def verify(self, credentials: Mapping[str, Any]) -> None:
        # A token says Google knows the key; listing says it may read the project's clusters.
        await self.clusters(credentials, None)

    async def clusters(
        self, credentials: Mapping[str, Any], region: str | None
    ) -> list[CloudCluster]:
        project = credentials["projectId"]
        answer = await _get(
            self._deny,
            credentials,
            f"/v1/projects/{project}/locations/{region or '-'}/clusters",
            f"listing GKE clusters of {project}",
        )
        listed = [] if answer is None else answer.body.get("clusters") or []
        return sorted(
            (_cluster(found, project) for found in listed), key=lambda c: (c.region, c.name)
        )

    async def describe(
        self, credentials: Mapping[str, Any], location: ClusterLocation
    ) -> CloudCluster | None:
        found = await self._describe(credentials, location)
        return None if found is None else _cluster(found, credentials["projectId"])

    async def _describe(
        self, credentials: Mapping[str, Any], location: ClusterLocation, token: str | None = None
    ) -> dict[str, Any] | None:
        project = credentials["projectId"]
        answer = await _get(
            self._deny,
            credentials,
            f"/v1/projects/{project}/locations/{location.region}/clusters/{location.name}",
            f"describing GKE cluster {location.name} in {location.region}",
            token,
        )
        return None if answer is None else answer.body

    async def mint(
        self, credentials: Mapping[str, Any], location: ClusterLocation
    ) -> ClusterCredentials:
        token, expires_at = await _token(credentials, self._deny)
        found = await self._describe(credentials, location, token)
        if found is None:
            raise PermanentError(
                f"no GKE cluster {location.name} in {location.region} on this project; "
                "was it deleted?"
            )
        endpoint = found.get("endpoint")
        ca_data = (found.get("masterAuth") or {}).get("clusterCaCertificate")
        if not endpoint or not ca_data:
            raise PermanentError(
                f"GKE cluster {location.name} reports no endpoint or CA yet; is it RUNNING?"
            )
        try:
            ca_pem = base64.b64decode(ca_data).decode()
        except ValueError as error:
            raise PermanentError("the GKE cluster's CA certificate is not base64") from error
        return ClusterCredentials(
            server=f"https://{endpoint}".rstrip("/"),
            ca_pem=ca_pem,
            token=token,
            expires_at=expires_at,
        )
