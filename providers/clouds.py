"""The one interface every cloud adapter serves, and the HTTP helpers they share
(bounded JSON calls, throttling retries, scrubbed refusals). The adapters import this
module; the registry of adapters by provider is providers.dispatch.

Core code never sees an SDK: it hands an adapter the account's decrypted
credentials (the canonical shape `core/spaces/clouds.py` checked) and gets back
clusters or a `ClusterCredentials`, or one of our `ProviderError`s. Messages
say what the cloud said, scrubbed of every credential value.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import aiohttp

from providers.cluster_credentials import ClusterCredentials
from providers.errors import PermanentError, ProviderError, TemporaryError, backoff_s
from providers.network import IPNetwork, fetch

T = TypeVar("T")

# Cloud API answers are small JSON documents; anything larger is refused unread.
MAX_BODY_BYTES = 4 * 1024 * 1024
CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 15.0
# Throttled calls are retried this many times, doubling the wait from THROTTLE_BACKOFF_S.
THROTTLE_RETRIES = 3
THROTTLE_BACKOFF_S = 0.25
# After that, the soonest a caller should try again (what the refusal's words say).
THROTTLED_RETRY_AFTER_S = 60.0


@dataclass(frozen=True)
class ClusterLocation:
    """Where a cluster is on an account: region (or location) and name; AZURE adds its group."""

    region: str | None
    name: str
    resource_group: str | None = None


@dataclass(frozen=True)
class CloudCluster:
    """A cluster as the cloud reports it."""

    name: str
    region: str
    endpoint: str | None = None
    version: str | None = None
    resource_group: str | None = None  # AZURE
    project_id: str | None = None  # GCP


class Throttled(TemporaryError):
    """The cloud kept answering 429 / Throttling after our retries."""


class CloudAdapter(Protocol):
    async def verify(self, credentials: Mapping[str, Any]) -> None:
        """Returns when the cloud accepts the credentials; raises a ProviderError otherwise."""

    async def clusters(
        self, credentials: Mapping[str, Any], region: str | None
    ) -> list[CloudCluster]:
        """Every cluster in `region`, or in every region the account covers when None."""

    async def describe(
        self, credentials: Mapping[str, Any], location: ClusterLocation
    ) -> CloudCluster | None:
        """The cluster, or None when the cloud says there is no such cluster."""

    async def mint(
        self, credentials: Mapping[str, Any], location: ClusterLocation
    ) -> ClusterCredentials:
        """A short-lived credential for the cluster's API server."""


def secret_values(credentials: Mapping[str, Any]) -> list[str]:
    """Every string inside the credentials, longest first, for scrubbing messages."""
    found: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, str) and len(value) >= 6:
            found.append(value)
            found.extend(line for line in value.splitlines() if len(line) >= 16)
        elif isinstance(value, Mapping):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(credentials)
    return sorted(set(found), key=len, reverse=True)


def scrub(message: str, secrets: Iterable[str]) -> str:
    """The message with any credential value cut out; clouds sometimes echo what they got."""
    for secret in secrets:
        message = message.replace(secret, "[redacted]")
    return message[:500]


async def retry_throttled(call: Callable[[], Awaitable[T]], what: str) -> T:
    """Runs `call`, retrying with backoff while it raises Throttled, then gives up saying so
    (and how long a caller should wait before trying again)."""
    for attempt in range(1, THROTTLE_RETRIES + 1):
        try:
            return await call()
        except Throttled:
            await asyncio.sleep(backoff_s(attempt, THROTTLE_BACKOFF_S, THROTTLED_RETRY_AFTER_S))
    try:
        return await call()
    except Throttled as error:
        raise Throttled(
            f"throttled: {what}: the cloud refused {THROTTLE_RETRIES + 1} attempts as too many "
            "requests; try again in a minute",
            retry_after_s=THROTTLED_RETRY_AFTER_S,
        ) from error


@dataclass(frozen=True)
class CloudAnswer:
    status: int
    body: dict[str, Any]


async def cloud_json(
    deny: tuple[IPNetwork, ...],
    method: str,
    url: str,
    token: str,
    doing: str,
    secrets: Iterable[str],
) -> CloudAnswer:
    """One call to a cloud REST API through the outbound gate: no redirects, bounded body
    and time; 429 raises Throttled, a transport failure a TemporaryError naming what we
    were doing."""
    try:
        answer = await fetch(
            deny,
            method,
            url,
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
            max_body_bytes=MAX_BODY_BYTES,
            timeout_s=CONNECT_TIMEOUT_S + READ_TIMEOUT_S,
        )
    except ProviderError as refused:
        raise PermanentError(f"{doing} failed: {refused.reason}") from refused
    except TimeoutError as error:
        raise TemporaryError(f"timeout: {doing} got no answer") from error
    except aiohttp.ClientError as error:
        raise TemporaryError(f"connection failed: {doing}: {type(error).__name__}") from error
    if answer.status == 429:
        raise Throttled(f"throttled: {doing} got 429")
    try:
        body = json.loads(answer.body) if answer.body else {}
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    return CloudAnswer(answer.status, body)


def refused(answer: CloudAnswer, doing: str, message: str, secrets: Iterable[str]) -> ProviderError:
    """The error for a cloud API's non-2xx answer, with what the cloud said."""
    said = scrub(message, secrets)
    detail = f": {said}" if said else ""
    if answer.status == 401:
        return PermanentError(f"{doing} failed: 401 unauthorized{detail}")
    if answer.status == 403:
        return PermanentError(f"{doing} failed: 403 forbidden{detail}")
    if answer.status >= 500:
        return TemporaryError(f"{doing} failed: HTTP {answer.status}{detail}")
    return PermanentError(f"{doing} failed: HTTP {answer.status}{detail}")
