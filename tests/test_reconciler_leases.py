"""A reconciler owns its CloudSpace for as long as a step runs, and no longer (issue 22, 7).

The host stand-in holds the step's apply unanswered (a slow API server). While it
waits, the server renews its lease; a step is stopped at 5/6 of the lease and retried
(FAILED, saying so); when another replica has taken the lease over, the server stops
the step at once and writes nothing of it; and two servers on one Postgres database
never have two callers waiting on the same step at once. A host that answers 429
(issue 22, 8) is asked again no sooner than its `Retry-After`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlmodel import col

from db.cloudspace_tables import CloudSpace, CloudSpaceEvent
from db.engine import Database
from sim.host_standin import HostStandIn
from tests.support.cloudspaces import CREATE, ONE, Platform, eventually, key, serve_platform
from tests.support.server import Backend, Server

LEASE_S = 12.0  # renewed every 4 s; a step is stopped at 10 s


@pytest.fixture(scope="module")
def host() -> Iterator[HostStandIn]:
    with HostStandIn(nodes=[("64", "256Gi")]) as standin:
        yield standin


@pytest.fixture(scope="module")
def platform(
    backend: Backend, host: HostStandIn, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Platform]:
    yield from serve_platform(
        backend,
        host,
        tmp_path_factory.mktemp("server") / "server.log",
        {"SPACEDOCK_RECONCILE_LEASE_S": f"{LEASE_S:g}"},
    )


@pytest.fixture
async def database(backend: Backend) -> AsyncIterator[Database]:
    """The servers' database, read and written as another replica would."""
    opened = Database(backend.url)
    yield opened
    await opened.dispose()


async def create(platform: Platform, name: str) -> dict[str, Any]:
    """A CloudSpace of the platform's own org on its host (the org has no default one)."""
    payload = await platform.admin.mutate(
        CREATE,
        {"input": {"name": name, "hostSpaceId": platform.host_id, "cpu": 0.5, "memoryMiB": 256}},
    )
    assert payload["userErrors"] == [], payload["userErrors"]
    created: dict[str, Any] = payload["cloudSpace"]
    return created


async def lease_of(database: Database, cloud_space_id: str) -> tuple[str | None, datetime | None]:
    async with database.transaction(read_only=True) as session:
        row = await session.get(CloudSpace, cloud_space_id)
        assert row is not None
        return row.claimed_by, row.lease_until


async def cloud_space(platform: Platform, cloud_space_id: str) -> dict[str, Any]:
    found: dict[str, Any] = (await platform.admin.data(ONE, {"id": cloud_space_id}))["cloudSpace"]
    return found


async def hand_back(database: Database, cloud_space_id: str) -> None:
    """What the replica that took the lease does when it is done: the lease ends."""
    async with database.transaction() as session:
        await session.execute(
            sa.update(CloudSpace)
            .where(col(CloudSpace.id) == cloud_space_id)
            .values(claimed_by=None, lease_until=None, next_attempt_at=datetime.now(UTC))
        )


async def test_a_long_step_keeps_its_lease_and_stops_when_another_replica_takes_it(
    platform: Platform, host: HostStandIn, database: Database
) -> None:
    host.api.hold_applies(kind="Namespace")
    created = await create(platform, "slow")
    namespace = f"cs-{key(created['id'])}"

    async def held() -> bool:
        return host.api.applies_waiting(namespace) == 1

    await eventually(held, 30)
    owner, first_lease = await lease_of(database, created["id"])
    assert owner is not None and first_lease is not None

    async def renewed() -> datetime | None:
        now_owner, lease = await lease_of(database, created["id"])
        assert now_owner == owner, "the step lost its lease while it ran"
        return lease if lease is not None and lease > first_lease else None

    await eventually(renewed, LEASE_S)  # a renewal comes within a third of the lease

    # Another replica takes the lease over, as one would after this server stalled.
    async with database.transaction() as session:
        await session.execute(
            sa.update(CloudSpace)
            .where(col(CloudSpace.id) == created["id"])
            .values(
                claimed_by="another-replica",
                lease_until=datetime.now(UTC) + timedelta(seconds=60),
            )
        )

    async def stopped() -> bool:
        return platform.server.metric("spacedock_reconcile_leases_lost_total") == 1

    await eventually(stopped, LEASE_S)
    await eventually(lambda: _no_client_waits(host, namespace), 10)  # its call was abandoned
    # Nothing of the stopped step was written: the new owner's lease, no failure.
    assert (await lease_of(database, created["id"]))[0] == "another-replica"
    seen = await cloud_space(platform, created["id"])
    assert (seen["phase"], seen["message"]) == ("PROVISIONING", None)

    await hand_back(database, created["id"])
    host.api.release_applies()

    async def ready() -> bool:
        return bool((await cloud_space(platform, created["id"]))["phase"] == "READY")

    await eventually(ready, 90)
    assert host.api.most_waiting_at_once(namespace) == 1


async def _no_client_waits(host: HostStandIn, namespace: str) -> bool:
    return host.api.applies_waiting(namespace) == 0


async def test_two_servers_never_run_one_step_at_once(
    platform: Platform, host: HostStandIn, backend: Backend, tmp_path: Path
) -> None:
    if backend.name != "postgres":
        pytest.skip("two servers share a database on Postgres")
    second = Server(
        backend=backend, log_path=tmp_path / "second.log", env=dict(platform.server.env)
    ).start()
    try:
        host.api.hold_applies(kind="Namespace")
        created = await create(platform, "contested")
        namespace = f"cs-{key(created['id'])}"

        async def tried_thrice() -> bool:
            return host.api.held_arrivals(namespace) >= 3

        # Each try is stopped at its deadline; without it, or without renewals, the
        # other server would claim the CloudSpace once the lease ran out, mid-step.
        await eventually(tried_thrice, 8 * LEASE_S)
        assert host.api.most_waiting_at_once(namespace) == 1
        seen = await cloud_space(platform, created["id"])
        assert seen["phase"] == "FAILED"
        assert seen["message"].startswith("timeout: step host-namespace took longer than 10s")
        host.api.release_applies()

        async def ready() -> bool:
            return bool((await cloud_space(platform, created["id"]))["phase"] == "READY")

        await eventually(ready, 90)
    finally:
        host.api.release_applies()
        second.stop()


async def test_a_throttled_host_is_asked_again_no_sooner_than_it_says(
    platform: Platform, host: HostStandIn, database: Database
) -> None:
    host.api.fail_apply(kind="Namespace", times=None, code=429, retry_after_s=7)
    try:
        created = await create(platform, "throttled")

        async def failed() -> dict[str, Any] | None:
            seen = await cloud_space(platform, created["id"])
            return seen if seen["phase"] == "FAILED" else None

        seen = await eventually(failed, 30)
        assert seen["message"].startswith(
            "HTTP 429 from the API server (too many requests, retry after 7s)"
        ), seen["message"]
        async with database.transaction(read_only=True) as session:
            row = await session.get(CloudSpace, created["id"])
            assert row is not None
            failed_at = await session.scalar(
                sa.select(sa.func.max(CloudSpaceEvent.at)).where(
                    col(CloudSpaceEvent.cloud_space_id) == created["id"],
                    col(CloudSpaceEvent.phase) == "FAILED",
                )
            )
        # The retry is due when the API server said, not after the reconciler's 0.2 s.
        assert failed_at is not None
        assert row.next_attempt_at - failed_at >= timedelta(seconds=7)
    finally:
        host.api.heal()

    async def ready() -> bool:
        return bool((await cloud_space(platform, created["id"]))["phase"] == "READY")

    await eventually(ready, 90)
