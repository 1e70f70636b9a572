"""Short-lived credentials for a cluster, minted per provider and cached until shortly
before they expire.

The credential types are in providers.cluster_credentials, the adapters behind
providers.dispatch. Minting may be a cloud round trip:
callers hold no database connection while they wait on `CredentialCache.get`.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from providers.clouds import ClusterLocation
from providers.cluster_credentials import ClusterCredentials, ClusterTarget
from providers.dispatch import adapter_for
from providers.errors import PermanentError

# A credential not asked for this long is dropped (its space is gone, or probed elsewhere).
IDLE_EVICTION = timedelta(minutes=15)
MAX_CACHED = 10_000


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
    location = ClusterLocation(
        region=target.config.get("region"),
        name=target.config["clusterName"],
        resource_group=target.config.get("resourceGroup"),
    )
    adapter = adapter_for(target.provider, target.deny)
    return await adapter.mint(target.account_credentials, location)


Mint = Callable[[ClusterTarget], Awaitable[ClusterCredentials]]


@dataclass
class _Cached:
    credentials: ClusterCredentials
    used: datetime


class CredentialCache:
    """Per-space credentials, reused until REFRESH_MARGIN before expiry.

    One mint per space at a time: callers that miss while a mint is running await
    that mint instead of starting their own. The cache is bounded: at most
    `max_entries`, the least recently used going first, and a sweep (at most every
    quarter of `idle`) drops expired credentials and those not asked for within
    `idle`, which is what becomes of a deregistered space's.
    """

    def __init__(
        self, mint: Mint = mint, max_entries: int = MAX_CACHED, idle: timedelta = IDLE_EVICTION
    ) -> None:
        self._mint_for = mint
        self.max_entries = max_entries
        self.idle = idle
        self._entries: OrderedDict[str, _Cached] = OrderedDict()
        self._minting: dict[str, asyncio.Task[ClusterCredentials]] = {}
        self._next_sweep = datetime.now(UTC) + idle / 4

    def __len__(self) -> int:
        return len(self._entries)

    def cached(self, space_id: str) -> ClusterCredentials | None:
        """The cached credential while it is fresh, else None."""
        now = datetime.now(UTC)
        cached = self._entries.get(space_id)
        if cached is None or not cached.credentials.fresh(now):
            return None
        cached.used = now
        self._entries.move_to_end(space_id)
        return cached.credentials

    async def get(self, space_id: str, target: Callable[[], ClusterTarget]) -> ClusterCredentials:
        """The cached credential, or one minted from `target()`, built only on a miss."""
        if (credentials := self.cached(space_id)) is not None:
            return credentials
        minting = self._minting.get(space_id)
        if minting is None:
            minting = asyncio.ensure_future(self._mint(space_id, target()))
            self._minting[space_id] = minting
            minting.add_done_callback(lambda done: self._minted(space_id, done))
        # Shielded: a caller that gives up does not cancel the mint the others await.
        return await asyncio.shield(minting)

    async def _mint(self, space_id: str, target: ClusterTarget) -> ClusterCredentials:
        minted = await self._mint_for(target)
        if self._minting.get(space_id) is asyncio.current_task():  # not forgotten meanwhile
            self._keep(space_id, minted)
        return minted

    def _minted(self, space_id: str, done: asyncio.Task[ClusterCredentials]) -> None:
        if self._minting.get(space_id) is done:
            del self._minting[space_id]
        if not done.cancelled():
            done.exception()  # seen here, so an error nobody awaited is not logged as lost

    def _keep(self, space_id: str, credentials: ClusterCredentials) -> None:
        now = datetime.now(UTC)
        self._entries[space_id] = _Cached(credentials, now)
        self._entries.move_to_end(space_id)
        if now >= self._next_sweep:
            self._next_sweep = now + self.idle / 4
            for key, cached in list(self._entries.items()):
                if not cached.credentials.fresh(now) or now - cached.used > self.idle:
                    del self._entries[key]
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def forget(self, space_id: str) -> None:
        """Drops the space's credential and disowns a mint in flight (access was revoked,
        or the space is gone): nothing minted for it before now is kept."""
        self._entries.pop(space_id, None)
        self._minting.pop(space_id, None)
