"""What every request and loop shares: database, bus, secrets and the health rule.

`Services.unit()` is the one transaction of a request or loop step; events
recorded on it are published only after it commits, and a credential change recorded on
it clears the verified tokens held in memory and rechecks open WebSockets before the unit
ends (core.common.token_cache, core.access.sessions).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncSession

from core.cloudspaces.settings import CloudSpaceSettings
from core.common.event_reads import SharedEventReads
from core.common.events import SPACE_STATUS, EventBus, Payload
from core.common.live_calls import LiveCalls
from core.common.refused_calls import RefusedCalls
from core.common.secrets import SecretBox
from core.common.token_cache import TokenCache
from core.spaces.health import HealthRule
from db.engine import Database
from providers.credentials import CredentialCache
from providers.network import DEFAULT_MAX_BODY_BYTES, IPNetwork
from providers.oidc import Sso


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass
class Unit:
    session: AsyncSession
    now: datetime = field(default_factory=utcnow)
    outbox: list[tuple[str, Payload]] = field(default_factory=list)
    probe_soon: bool = False  # a space wants its first (or next) probe now
    reconcile_soon: bool = False  # a CloudSpace has work for the reconciler now
    deliver_soon: bool = False  # an app has work for the delivery worker now
    # A token was revoked or a role changed: verified tokens held in memory may be stale.
    credentials_changed: bool = False

    def publish(self, channel: str, payload: Payload) -> None:
        self.outbox.append((channel, payload))


@dataclass
class Services:
    database: Database
    bus: EventBus
    secrets: SecretBox
    health: HealthRule
    # API servers in these networks are never contacted (besides link-local, always denied).
    deny_networks: tuple[IPNetwork, ...] = ()
    # The most a cluster call reads of one answer (SPACEDOCK_CLUSTER_MAX_BODY_BYTES).
    cluster_max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    # Caps on live cluster calls per operation and per process (core.common.live_calls).
    live_calls: LiveCalls = field(default_factory=LiveCalls)
    credentials: CredentialCache = field(default_factory=CredentialCache)
    # Orgs (by name) whose cloud accounts may use the server's own cloud identity.
    ambient_credential_orgs: frozenset[str] = frozenset()
    # Set when a space needs probing now (registration, a lifted hold).
    probe_wanted: asyncio.Event = field(default_factory=asyncio.Event)
    cloudspaces: CloudSpaceSettings = field(default_factory=CloudSpaceSettings)
    # Set when a CloudSpace has work now (created, resized, deleted).
    reconcile_wanted: asyncio.Event = field(default_factory=asyncio.Event)
    # Set when an app has work now (a revision, a suspension, a sync, a deletion).
    delivery_wanted: asyncio.Event = field(default_factory=asyncio.Event)
    # SSO with bearer JWTs (SPACEDOCK_OIDC_*); None: API tokens only.
    sso: Sso | None = None
    # How long a live field (Space.namespaces) waits on one cluster before it gives up.
    live_field_timeout_s: float = 2.0
    # Verified API tokens held for a moment, so a request skips the lookup (issue 12).
    token_cache: TokenCache = field(default_factory=TokenCache)
    # The audit log's budget of refused calls per credential (core.common.refused_calls).
    refused_calls: RefusedCalls = field(default_factory=RefusedCalls)
    # Status events read once per process for all their subscribers (issue 12).
    event_reads: SharedEventReads = field(init=False)

    def __post_init__(self) -> None:
        self.event_reads = SharedEventReads(self.read)
        # Reads start as events are fanned out, a storm's together (issue 19).
        self.bus.tap(SPACE_STATUS, lambda payload: self.event_reads.announced(payload))

    @asynccontextmanager
    async def unit(self, read_only: bool = False) -> AsyncIterator[Unit]:
        """`read_only`: the unit never writes, so on SQLite it need not wait for the
        write lock (see db.engine)."""
        async with self.database.transaction(read_only) as session:
            unit = Unit(session)
            yield unit
        changed_at = self.token_cache.clear() if unit.credentials_changed else None
        if unit.outbox:
            await self.bus.publish_all(unit.outbox)
        if unit.probe_soon:
            self.probe_wanted.set()
        if unit.reconcile_soon:
            self.reconcile_wanted.set()
        if unit.deliver_soon:
            self.delivery_wanted.set()
        if changed_at is not None:  # no old Viewer is in use anywhere once this returns
            await self.token_cache.settle(changed_at)

    @asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncSession]:
        """A short read-only transaction."""
        async with self.database.transaction(read_only=True) as session:
            yield session
