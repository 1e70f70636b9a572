"""Verified API tokens held in memory (core/common/token_cache.py): repeated requests send no SQL
for the token, and every revocation, role change and expiry still holds at once.

Against a real server (and a second replica on Postgres), plus the cache itself in-process
on a real database to see what it holds: hashes only, never a refusal.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from api.app import build_services
from api.settings import Settings
from core.access.auth import authenticate
from core.access.tokens import revoke, token_hash
from core.common.errors import Unauthenticated
from core.common.events import InProcessBus
from core.common.rbac import Role, Viewer
from core.common.secrets import SecretBox
from core.common.services import Services
from core.common.token_cache import TokenCache
from core.orgs.bootstrap import create_token
from core.spaces.health import HealthRule
from db.engine import Database
from tests.conftest import Org
from tests.support import factories as make
from tests.support.graphql import GraphQL, RawSocket
from tests.support.server import Backend, Server
from tests.support.sql_counts import quiet, statements

WHO = "{ viewer { role permissions } }"
CREATE_TOKEN = f"""
mutation($input: CreateApiTokenInput!) {{
  createApiToken(input: $input) {{ token apiToken {{ id }} {make.USER_ERRORS} }}
}}"""
REVOKE_TOKEN = f"""
mutation($id: ID!) {{ revokeApiToken(input: {{id: $id}}) {{ apiToken {{ id }} {make.USER_ERRORS} }} }}"""
CREATE_ROLE = f"""
mutation($input: CreateRoleInput!) {{ createRole(input: $input) {{ role {{ id }} {make.USER_ERRORS} }} }}"""
UPDATE_ROLE = f"""
mutation($input: UpdateRoleInput!) {{ updateRole(input: $input) {{ role {{ id }} {make.USER_ERRORS} }} }}"""


@pytest.fixture(scope="module")
def server_env() -> dict[str, str]:
    # No probe may run (and send SQL) while a test counts statements.
    return {"SPACEDOCK_PROBE_INTERVAL_S": "3600"}


async def new_token(admin: GraphQL, role: str = "VIEWER") -> tuple[str, GraphQL]:
    variables = {"name": make.unique("tok"), "role": role}
    made = make.succeeded(await admin.mutate(CREATE_TOKEN, {"input": variables}))
    return made["apiToken"]["id"], GraphQL(admin.url, admin.ws_url, made["token"])


async def test_repeated_requests_send_no_sql_for_the_token_but_refusals_always_look(
    server: Server, org: Org
) -> None:
    _, caller = await new_token(org.admin)
    await caller.data(WHO)  # verified once (and lastUsedAt written)
    await quiet(server)
    before = await statements(server)
    for _ in range(20):
        await caller.data(WHO)
    held = await statements(server) - before
    # A lookup per request would be 20 statements (40 with SQLite's BEGIN); the held token
    # needs none, save one more lookup if the copy lapsed meanwhile and a stray loop step.
    assert held <= 4, f"{held} statements for 20 requests"

    stranger = GraphQL(server.url, server.ws_url, "sdk_" + "x" * 43)
    before = await statements(server)
    for _ in range(5):
        assert (await stranger.post(WHO))[0] == 401
    assert await statements(server) - before >= 5, "a refusal is looked up every time"


async def test_a_revoked_token_is_refused_at_once_over_http_and_websocket(
    server: Server, org: Org
) -> None:
    token_id, caller = await new_token(org.admin)
    for _ in range(3):  # held in memory now
        assert (await caller.post(WHO))[0] == 200
    make.succeeded(await org.admin.mutate(REVOKE_TOKEN, {"id": token_id}))

    status, body = await caller.post(WHO)
    assert status == 401
    assert "revoked" in body["errors"][0]["message"]
    async with RawSocket(server.ws_url, caller.token) as socket:
        assert await socket.init() is None
        assert socket.close_code == 4403
        assert "revoked" in (socket.close_reason or "")


async def test_new_policies_of_a_custom_role_reach_a_token_held_in_memory(org: Org) -> None:
    role = make.succeeded(
        await org.admin.mutate(
            CREATE_ROLE, {"input": {"name": make.unique("role"), "policies": ["space:view"]}}
        )
    )["role"]
    _, caller = await new_token(org.admin, role["id"])
    for _ in range(3):
        assert (await caller.data(WHO))["viewer"]["permissions"] == ["space:view"]
    make.succeeded(
        await org.admin.mutate(
            UPDATE_ROLE, {"input": {"id": role["id"], "policies": ["space:view", "space:create"]}}
        )
    )
    assert (await caller.data(WHO))["viewer"]["permissions"] == ["space:view", "space:create"]


# -- another replica (Postgres) ------------------------------------------------------


async def test_a_revocation_on_one_replica_holds_on_the_other_once_it_returns(
    server: Server, replica: Server, org: Org
) -> None:
    token_id, caller = await new_token(org.admin)
    there = GraphQL(replica.url, replica.ws_url, caller.token)
    for _ in range(3):  # held in memory by both replicas
        assert (await caller.post(WHO))[0] == 200
        assert (await there.post(WHO))[0] == 200
    # The replica keeps using the token until the revocation has committed, so its copy is
    # as fresh as it can be when the mutation (on the other replica) returns.
    revoked = asyncio.Event()

    async def keep_using() -> None:
        while not revoked.is_set():
            await there.post(WHO)

    using = asyncio.create_task(keep_using())
    make.succeeded(await org.admin.mutate(REVOKE_TOKEN, {"id": token_id}))
    revoked.set()
    await using
    status, body = await there.post(WHO)
    assert status == 401
    assert "revoked" in body["errors"][0]["message"]


async def test_a_role_change_on_one_replica_holds_on_the_other_once_it_returns(
    server: Server, replica: Server, org: Org
) -> None:
    role = make.succeeded(
        await org.admin.mutate(
            CREATE_ROLE, {"input": {"name": make.unique("role"), "policies": ["space:view"]}}
        )
    )["role"]
    _, caller = await new_token(org.admin, role["id"])
    there = GraphQL(replica.url, replica.ws_url, caller.token)
    assert (await there.data(WHO))["viewer"]["permissions"] == ["space:view"]
    make.succeeded(
        await org.admin.mutate(
            UPDATE_ROLE, {"input": {"id": role["id"], "policies": ["space:view", "space:create"]}}
        )
    )
    assert (await there.data(WHO))["viewer"]["permissions"] == ["space:view", "space:create"]


# -- the cache itself, in-process ----------------------------------------------------


def strings_in(value: Any) -> Iterator[str]:
    """Every string reachable from a cache entry (dataclasses, tuples, plain values)."""
    if isinstance(value, str):
        yield value
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for item in dataclasses.fields(value):
            yield from strings_in(getattr(value, item.name))
    elif isinstance(value, list | tuple | set | frozenset):
        for item in value:
            yield from strings_in(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from strings_in(key)
            yield from strings_in(item)
    else:
        yield str(value)


async def test_the_cache_holds_token_hashes_and_viewers_never_a_token_or_a_refusal(
    empty_backend: Backend,
) -> None:
    database = Database(empty_backend.url)
    services = Services(
        database=database,
        bus=InProcessBus(),
        secrets=SecretBox(SecretBox.generate_key()),
        health=HealthRule(60),
        token_cache=TokenCache(ttl_s=3600, others_may_cache=False),
    )
    try:
        await database.migrate()
        async with services.unit() as unit:
            _, secret = await create_token(unit, "held", "VIEWER")
        first = await authenticate(services, f"Bearer {secret}")
        assert await authenticate(services, f"Bearer {secret}") == first

        held = services.token_cache._entries
        assert list(held) == [token_hash(secret)]
        reachable = list(strings_in(dict(held.items())))
        assert not any(secret in text or secret[4:] in text for text in reachable)

        for refused in ("sdk_unknown", f"{secret}x"):
            with pytest.raises(Unauthenticated):
                await authenticate(services, f"Bearer {refused}")
        assert list(held) == [token_hash(secret)], "refusals are not held"

        # A revocation in this process clears what it held as the unit commits.
        admin = Viewer(org_id=first.org_id, org_name=first.org_name, role=Role.ADMIN)
        assert first.token_id is not None
        async with services.unit() as unit:
            await revoke(unit, admin, first.token_id)
        assert len(services.token_cache) == 0
        with pytest.raises(Unauthenticated, match="revoked"):
            await authenticate(services, f"Bearer {secret}")
        assert len(services.token_cache) == 0
    finally:
        await database.dispose()


def test_a_lookup_begun_before_an_invalidation_is_not_held() -> None:
    now = [100.0]
    cache = TokenCache(ttl_s=2, clock=lambda: now[0])
    viewer = Viewer(org_id="org_1", org_name="one", role=Role.VIEWER, token_id="tok_1")
    ticket = cache.ticket()
    cache.clear()  # a revocation committed while the lookup read
    cache.put("hash", ticket, viewer, None)
    assert cache.get("hash") is None

    cache.put("hash", cache.ticket(), viewer, None)
    assert cache.get("hash") is not None
    now[0] += 2  # lapsed: counted from the start of the lookup
    assert cache.get("hash") is None and len(cache) == 0


def test_the_cache_is_bounded_dropping_the_least_recently_used() -> None:
    cache = TokenCache(ttl_s=60, max_entries=2)
    viewer = Viewer(org_id="org_1", org_name="one", role=Role.VIEWER)
    for name in ("a", "b"):
        cache.put(name, cache.ticket(), viewer, None)
    assert cache.get("a") is not None  # "b" is now the least recently used
    cache.put("c", cache.ticket(), viewer, None)
    assert cache.get("b") is None and len(cache) == 2
    assert cache.get("a") is not None and cache.get("c") is not None


async def test_a_change_returns_only_once_other_processes_copies_have_lapsed(
    empty_backend: Backend,
) -> None:
    """Where another process may hold the token (a command beside the server, a replica on
    Postgres), the revocation's unit ends only after waiting out the TTL from its commit."""
    waited: list[tuple[float, int]] = []
    database = Database(empty_backend.url)

    async def sleep(seconds: float) -> None:
        committed = await revoked_at_in_database()
        waited.append((seconds, committed))

    async def revoked_at_in_database() -> int:
        async with database.transaction(read_only=True) as session:
            found = await session.scalar(
                sa.text("SELECT count(*) FROM api_tokens WHERE revoked_at IS NOT NULL")
            )
        return int(found or 0)

    services = Services(
        database=database,
        bus=InProcessBus(),
        secrets=SecretBox(SecretBox.generate_key()),
        health=HealthRule(60),
        token_cache=TokenCache(ttl_s=7, others_may_cache=True, sleep=sleep),
    )
    try:
        await database.migrate()
        async with services.unit() as unit:
            _, secret = await create_token(unit, "waits", "VIEWER")
        assert waited == [], "minting a token changes no held credential"
        viewer = await authenticate(services, f"Bearer {secret}")
        admin = Viewer(org_id=viewer.org_id, org_name=viewer.org_name, role=Role.ADMIN)
        assert viewer.token_id is not None
        async with services.unit() as unit:
            await revoke(unit, admin, viewer.token_id)
        [(seconds, committed)] = waited
        assert seconds >= 7, "at least the TTL"
        assert committed == 1, "waited after the commit"
    finally:
        await database.dispose()


@pytest.mark.parametrize(
    ("url", "serving", "waits"),
    [
        ("sqlite+aiosqlite:///{tmp}/one.db", True, False),  # the one server process
        ("sqlite+aiosqlite:///{tmp}/one.db", False, True),  # `spacedock token revoke`
        ("postgresql+asyncpg://spacedock@127.0.0.1:1/none", True, True),  # replicas
        ("postgresql+asyncpg://spacedock@127.0.0.1:1/none", False, True),
    ],
)
async def test_who_waits_out_other_processes(
    url: str, serving: bool, waits: bool, tmp_path: Path
) -> None:
    settings = Settings(
        database_url=url.format(tmp=tmp_path),
        secret_key=SecretBox.generate_key(),
        token_cache_ttl_s=3,
    )
    services = build_services(settings, serving=serving)
    try:
        assert services.token_cache.others_may_cache is waits
        assert services.token_cache.ttl_s == 3
    finally:
        await services.database.dispose()
