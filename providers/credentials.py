"""Short-lived credentials for a cluster, minted per provider and cached until shortly
before they expire.

`ClusterCredentials` is frozen and hides its secrets from repr, so a logged
or printed credential shows no key material.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from providers.errors import PermanentError

# A cached credential is replaced this long before it expires.
REFRESH_MARGIN = timedelta(seconds=60)


@dataclass(frozen=True)
class ClusterCredentials:
    server: str
    ca_pem: str = field(repr=False)
    token: str | None = field(default=None, repr=False)
    client_certificate_pem: str | None = field(default=None, repr=False)
    client_key_pem: str | None = field(default=None, repr=False)
    expires_at: datetime | None = None  # None: a static credential (GENERIC)

    def fresh(self, now: datetime) -> bool:
        return self.expires_at is None or self.expires_at - REFRESH_MARGIN > now


@dataclass(frozen=True)
class ClusterTarget:
    """What a provider needs to mint a credential for one space's cluster."""

    space_id: str
    provider: str
    config: Mapping[str, str]
    secret: Mapping[str, str] = field(repr=False)  # GENERIC: caCert, token or client cert/key
    account_credentials: Mapping[str, Any] | None = field(default=None, repr=False)


async def mint(target: ClusterTarget) -> ClusterCredentials:
    """GENERIC: the stored credential as it is; a cloud: a fresh token from its adapter."""
    if target.provider == "GENERIC":
        return ClusterCredentials(
            server=target.config["server"],
            ca_pem=target.secret["caCert"],
            token=target.secret.get("serviceAccountToken"),
            client_certificate_pem=target.secret.get("clientCertificate"),
            client_key_pem=target.secret.get("clientKey"),
        )
    if target.account_credentials is None:
        raise PermanentError("cluster access revoked: the cloud account was deleted")
    from providers.clouds import ClusterLocation, adapter_for  # the adapters import this module

    location = ClusterLocation(
        region=target.config.get("region"),
        name=target.config["clusterName"],
        resource_group=target.config.get("resourceGroup"),
    )
    return await adapter_for(target.provider).mint(target.account_credentials, location)


class CredentialCache:
    """Per-space credentials, reused until REFRESH_MARGIN before expiry."""

    def __init__(self) -> None:
        self._entries: dict[str, ClusterCredentials] = {}

    async def get(
        self, space_id: str, target: Callable[[], Awaitable[ClusterTarget]]
    ) -> ClusterCredentials:
        """The cached credential, or one minted from `target()`, built only on a miss."""
        cached = self._entries.get(space_id)
        if cached is not None and cached.fresh(datetime.now(UTC)):
            return cached
        minted = await mint(await target())
        self._entries[space_id] = minted
        return minted

    def forget(self, space_id: str) -> None:
        self._entries.pop(space_id, None)
