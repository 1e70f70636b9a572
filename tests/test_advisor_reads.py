"""App Advisor findings in the database, run in this process on the real database of each
backend (no background loop, so statements can be counted exactly): how runs merge by
fingerprint (a second run changes nothing, a partial read resolves nothing, a dismissal
survives runs, a finding found again keeps its id), and what a page of CloudSpace cards
costs: its advice counts and first pages in the same statements for 1 or 20 CloudSpaces."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from core.advisor import findings as advice
from core.advisor.analysis import analyze
from core.advisor.ownership import AppIndex
from core.common.events import InProcessBus
from core.common.ids import new_id
from core.common.rbac import Role, Viewer
from core.common.secrets import SecretBox
from core.common.services import Services
from core.orgs.bootstrap import create_token
from core.spaces.health import HealthRule
from core.spaces.lifecycle import RegisterSpaceRequest, register
from db.advisor_tables import AdvisorFinding
from db.cloudspace_tables import CloudSpace
from db.engine import Database
from resolvers.common.context import Context
from schema.build import schema
from sim import workloads as w
from tests.support.factories import generic_config, unique
from tests.support.server import Backend


@dataclass
class World:
    services: Services
    viewer: Viewer
    host_id: str


@pytest.fixture
async def world(empty_backend: Backend) -> AsyncIterator[World]:
    services = Services(
        database=Database(empty_backend.url),
        bus=InProcessBus(),
        secrets=SecretBox(SecretBox.generate_key()),
        health=HealthRule(3600),
    )
    await services.database.migrate()
    async with services.unit() as unit:
        org, _ = await create_token(unit, unique("org"), "ADMIN")
    viewer = Viewer(org.id, org.name, Role.ADMIN)
    request = RegisterSpaceRequest(
        unique("host"), "GENERIC", "KUBERNETES", None, generic_config(), False
    )
    async with services.unit() as unit:
        host = await register(unit, viewer, services.secrets, request, ())
    try:
        yield World(services, viewer, host.id)
    finally:
        await services.database.dispose()


async def cloud_space(world: World, name: str) -> CloudSpace:
    async with world.services.unit() as unit:
        row = CloudSpace(
            id=new_id("cs"),
            org_id=world.viewer.org_id,
            name=name,
            host_space_id=world.host_id,
            cpu=4,
            memory_mib=4096,
            phase="READY",
            step="refresh",
            next_attempt_at=unit.now,
            created_at=unit.now,
        )
        unit.session.add(row)
    return row


async def run(
    world: World, row: CloudSpace, *objects: Any, complete: bool = True
) -> list[tuple[str, str]]:
    found = analyze(w.snapshot(*objects), frozenset(), AppIndex())
    async with world.services.unit() as unit:
        changes = await advice.merge(unit, row, found, complete=complete, explain=False)
    return [(finding_id, change.value) for finding_id, change in changes]


def only(changes: Sequence[tuple[str, str]]) -> set[str]:
    return {change for _, change in changes}


async def test_runs_merge_by_fingerprint(world: World) -> None:
    row = await cloud_space(world, "shop")
    deployment, replica_set, pods = w.healthy()
    pods[0]["status"] = w.crash_looping(pods[0], "web")
    first = await run(world, row, deployment, replica_set, *pods)
    assert only(first) == {"NEW"}
    crash_id = next(i for i, _ in first)
    assert await run(world, row, deployment, replica_set, *pods) == []  # nothing new, nothing twice

    pods[0]["status"] = w.running(pods[0])
    assert await run(world, row, deployment, replica_set, *pods, complete=False) == []
    assert await run(world, row, deployment, replica_set, *pods) == [(crash_id, "RESOLVED")]
    pods[1]["status"] = w.crash_looping(pods[1], "web")
    assert await run(world, row, deployment, replica_set, *pods) == [(crash_id, "REOPENED")]

    async with world.services.unit() as unit:
        await advice.dismiss(unit, world.viewer, crash_id, "known: fixed in the next release")
    assert await run(world, row, deployment, replica_set, *pods) == []
    pods[1]["status"] = w.running(pods[1])
    assert await run(world, row, deployment, replica_set, *pods) == [(crash_id, "RESOLVED")]
    pods[1]["status"] = w.crash_looping(pods[1], "web")
    assert await run(world, row, deployment, replica_set, *pods) == [(crash_id, "REOPENED")]
    async with world.services.read() as session:
        stored = await session.get(AdvisorFinding, crash_id)
    assert stored is not None and stored.dismissed_at is not None  # dismissed it stays


CARDS = """query($first: Int!) { cloudSpaces(first: $first) { totalCount nodes {
    name adviceCounts { critical warning info total }
    advice(first: 2) { totalCount counts { critical total } pageInfo { hasNextPage }
                       nodes { ruleId severity object { name } } }
    advisor { enabled }
} } }"""
PLAIN = "query($first: Int!) { cloudSpaces(first: $first) { totalCount nodes { name } } }"


async def statements(world: World, query: str, first: int) -> tuple[int, dict[str, Any]]:
    before = world.services.database.statement_count
    result = await schema.execute(
        query, variable_values={"first": first}, context_value=Context(world.services, world.viewer)
    )
    assert not result.errors, result.errors
    assert result.data is not None
    return world.services.database.statement_count - before, result.data


async def test_a_page_of_cards_reads_its_advice_in_the_same_statements_whatever_its_size(
    world: World,
) -> None:
    for index in range(20):
        row = await cloud_space(world, f"space-{index:02}")
        deployment, replica_set, pods = w.healthy(replicas=1)  # single-replica: a WARNING
        if index % 2:
            pods[0]["status"] = w.crash_looping(pods[0], "web")  # and a CRITICAL
        await run(world, row, deployment, replica_set, *pods)
    overhead = {}
    for first in (1, 5, 20):
        plain, _ = await statements(world, PLAIN, first)
        with_advice, data = await statements(world, CARDS, first)
        overhead[first] = with_advice - plain
    # Counts (twice at most: two fields ask in different ticks), first pages, schedules.
    assert overhead[1] == overhead[5] == overhead[20] <= 4
    cards = data["cloudSpaces"]["nodes"]
    assert len(cards) == 20
    odd = next(c for c in cards if c["name"] == "space-01")
    assert odd["adviceCounts"] == {"critical": 1, "warning": 1, "info": 0, "total": 2}
    assert [n["severity"] for n in odd["advice"]["nodes"]] == ["CRITICAL", "WARNING"]
    even = next(c for c in cards if c["name"] == "space-00")
    assert even["advice"]["totalCount"] == 1 and even["advice"]["pageInfo"]["hasNextPage"] is False
    assert even["advisor"] == {"enabled": False}  # never run by the loop here


async def test_an_app_change_or_a_cloudspace_ready_again_makes_its_run_due_now(
    world: World,
) -> None:
    from datetime import timedelta

    from db import advisor as advice_rows
    from db.app_tables import AppEvent
    from db.cloudspace_tables import CloudSpaceEvent

    row = await cloud_space(world, "shop")
    other = await cloud_space(world, "quiet")
    async with world.services.unit() as unit:
        await advice_rows.enroll_ready(unit.session, unit.now)
        seen = await advice_rows.newest_events(unit.session)
    later = unit.now + timedelta(hours=1)

    async def due() -> dict[str, bool]:
        async with world.services.read() as session:
            schedules = await advice_rows.schedules(session, [row.id, other.id])
        return {s.cloud_space_id: s.next_run_at < later for s in schedules}

    async def look() -> None:
        async with world.services.unit() as unit:
            await advice_rows.run_changed_soon(unit.session, seen, unit.now)

    async def push_back() -> None:
        async with world.services.unit() as unit:
            for schedule in await advice_rows.schedules(unit.session, [row.id, other.id]):
                schedule.next_run_at = later
                unit.session.add(schedule)

    await push_back()
    await look()
    assert await due() == {row.id: False, other.id: False}  # nothing happened since
    async with world.services.unit() as unit:
        unit.session.add(
            AppEvent(
                app_id="app_x",
                org_id=row.org_id,
                cloud_space_id=row.id,
                kind="STATUS",
                status="READY",
                at=unit.now,
            )
        )
    await look()
    assert await due() == {row.id: True, other.id: False}
    await push_back()
    await look()
    assert await due() == {row.id: False, other.id: False}  # that change was seen once
    async with world.services.unit() as unit:
        unit.session.add(
            CloudSpaceEvent(
                cloud_space_id=other.id,
                org_id=other.org_id,
                previous="FAILED",
                phase="READY",
                at=unit.now,
            )
        )
    await look()
    assert await due() == {row.id: False, other.id: True}
