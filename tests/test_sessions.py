"""Open WebSockets' credentials (core/access/sessions.py), in-process on a real database, with a
recording stand-in for the socket: what a change does to a session before the change
returns, and when a session may send (issue 18). The same through real sockets and
replicas is in test_credential_sessions.py."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest

from core.access import roles, tokens
from core.access.auth import authenticate
from core.access.sessions import REVOKED, ROLE_DELETED, Sessions
from core.common.events import InProcessBus
from core.common.rbac import Role, Viewer
from core.common.secrets import SecretBox
from core.common.services import Services
from core.common.token_cache import TokenCache
from core.orgs import bootstrap
from core.spaces.health import HealthRule
from db.engine import Database
from tests.support.server import Backend

TTL_S = 0.5


@dataclass
class Recorded:
    """core.access.sessions.Connection, recording what was done to it."""

    stopped: list[str] = field(default_factory=list)
    regranted: list[Viewer] = field(default_factory=list)
    withdrawn: asyncio.Event = field(default_factory=asyncio.Event)

    def stop(self, reason: str) -> None:
        self.stopped.append(reason)

    def regrant(self, viewer: Viewer) -> None:
        self.regranted.append(viewer)

    def withdraw_sends(self) -> None:
        self.withdrawn.set()


@dataclass
class Setup:
    services: Services
    sessions: Sessions
    admin: Viewer


@pytest.fixture
async def setup(empty_backend: Backend) -> AsyncIterator[Setup]:
    database = Database(empty_backend.url)
    services = Services(
        database=database,
        bus=InProcessBus(),
        secrets=SecretBox(SecretBox.generate_key()),
        health=HealthRule(60),
        token_cache=TokenCache(ttl_s=TTL_S, others_may_cache=False),
    )
    sessions = Sessions(services, TTL_S)
    services.token_cache.holders.append(sessions)
    try:
        await database.migrate()
        async with services.unit() as unit:
            org, _ = await bootstrap.create_token(unit, "held", "ADMIN")
        yield Setup(services, sessions, Viewer(org_id=org.id, org_name=org.name, role=Role.ADMIN))
    finally:
        await database.dispose()


async def signed_in(setup: Setup, role: str) -> Viewer:
    async with setup.services.unit() as unit:
        _, secret = await bootstrap.create_token(unit, "held", role)
    return await authenticate(setup.services, f"Bearer {secret}")


async def test_a_session_sends_only_while_a_recent_check_found_its_credential(
    setup: Setup,
) -> None:
    viewer = await signed_in(setup, "VIEWER")
    session = setup.sessions.open(viewer, Recorded())
    assert not setup.sessions.deliverable(session), "not verified before its first check"
    assert await setup.sessions.verified(session)  # runs a check
    assert setup.sessions.deliverable(session)

    connection = session.connection
    assert isinstance(connection, Recorded)
    # Its frames still waiting for the socket are withdrawn once the verification lapses.
    await asyncio.wait_for(connection.withdrawn.wait(), TTL_S * 10)
    assert not setup.sessions.deliverable(session)
    assert await setup.sessions.verified(session)
    assert connection.stopped == [] and connection.regranted == []


async def test_a_revocation_stops_the_session_before_it_returns(setup: Setup) -> None:
    viewer = await signed_in(setup, "VIEWER")
    connection = Recorded()
    session = setup.sessions.open(viewer, connection)
    assert await setup.sessions.verified(session)
    assert viewer.token_id is not None

    async with setup.services.unit() as unit:
        await tokens.revoke(unit, setup.admin, viewer.token_id)
    assert connection.stopped == [REVOKED], "stopped before the revocation's unit ended"
    assert not await setup.sessions.verified(session)


async def test_a_role_change_regrants_and_a_deleted_role_stops_before_it_returns(
    setup: Setup,
) -> None:
    async with setup.services.unit() as unit:
        role = await roles.create(unit, setup.admin, "watchers", ["space:view", "audit:view"])
    viewer = await signed_in(setup, role.id)
    connection = Recorded()
    session = setup.sessions.open(viewer, connection)
    assert await setup.sessions.verified(session)

    async with setup.services.unit() as unit:
        await roles.update(unit, setup.admin, role.id, ["space:view"])
    [regranted] = connection.regranted
    assert regranted.permissions == ("space:view",)
    assert session.viewer == regranted
    assert setup.sessions.deliverable(session), "verified anew by the recheck"

    # An SSO session can hold a role no token holds, and the role can then be deleted.
    sso = Viewer(
        org_id=viewer.org_id,
        org_name=viewer.org_name,
        role=Role.CUSTOM,
        custom_role=regranted.custom_role,
    )
    sso_connection = Recorded()
    setup.sessions.open(sso, sso_connection)
    async with setup.services.unit() as unit:
        assert viewer.token_id is not None
        await tokens.revoke(unit, setup.admin, viewer.token_id)
    async with setup.services.unit() as unit:
        await roles.delete(unit, setup.admin, role.id)
    assert sso_connection.stopped == [ROLE_DELETED]


async def test_a_failed_recheck_is_waited_out_instead(setup: Setup) -> None:
    """When the database cannot be asked, the change still returns only once what the
    sessions hold has lapsed."""
    waited: list[float] = []

    async def sleep(seconds: float) -> None:
        waited.append(seconds)

    class Failing:
        async def recheck(self, since: float) -> None:
            raise ConnectionError("the database went away")

    cache = TokenCache(ttl_s=TTL_S, others_may_cache=False, sleep=sleep)
    cache.holders.append(Failing())
    await cache.settle(cache.clear())
    assert waited and waited[0] >= TTL_S

    waited.clear()
    cache.holders[:] = [setup.sessions]
    await cache.settle(cache.clear())
    assert waited == [], "a recheck that worked needs no wait in a process alone"


async def test_a_check_that_just_ended_is_not_awaited_in_a_spin(setup: Setup) -> None:
    """A socket that asks for a check in the turn of the event loop after one ended, before
    that check's callback ran, must start its own: awaiting the ended one yields nothing, and
    a session that check did not cover (opened since, or lapsed again while a slow database
    answered) stays undeliverable, so `verified` spun for ever and froze the whole process
    (seen in bench/soak.py under a storm: 100% CPU, nothing served)."""
    ended = asyncio.Event()
    sessions: Sessions

    def clock() -> float:
        # Read by the check itself as it ends: the other socket wakes in the next turn,
        # ahead of the check's own callbacks.
        if sessions._running is not None:
            ended.set()
        return time.monotonic()

    sessions = Sessions(setup.services, TTL_S, clock=clock)
    first = sessions.open(await signed_in(setup, "VIEWER"), Recorded())
    viewer = await signed_in(setup, "VIEWER")

    async def late_socket() -> bool:
        await ended.wait()
        second = sessions.open(viewer, Recorded())  # not among what the ended check read
        return await sessions.verified(second) and sessions.deliverable(second)

    late = asyncio.create_task(late_socket())
    assert await sessions.verified(first)
    assert await late
