"""Audit events older than SPACEDOCK_AUDIT_RETENTION_DAYS are pruned by the background
housekeeping loop, with nobody asking; newer ones stay."""

from __future__ import annotations

import asyncio

import pytest

from tests.conftest import Org
from tests.support import factories as make
from tests.support.server import Server

RETENTION_S = 8.0
COUNT = "{ auditEvents(first: 100) { nodes { id } } }"


@pytest.fixture(scope="module")
def server_env() -> dict[str, str]:
    return {
        "SPACEDOCK_PROBE_INTERVAL_S": "3600",
        "SPACEDOCK_AUDIT_RETENTION_DAYS": str(RETENTION_S / 86400),
    }


async def ids(org: Org) -> set[str]:
    return {e["id"] for e in (await org.admin.data(COUNT))["auditEvents"]["nodes"]}


async def test_events_past_the_retention_are_pruned(server: Server, org: Org) -> None:
    await make.register_generic_space(org.admin)
    first = await ids(org)
    assert len(first) == 1, "recorded at once"
    for _ in range(300):  # bounded: 30 s, several retention periods
        if not first & await ids(org):
            break
        await asyncio.sleep(0.1)
    else:
        pytest.fail("the event outlived its retention")
    assert server.metric("spacedock_audit_events_pruned_total") >= 1
    await make.register_generic_space(org.admin)
    assert len(await ids(org)) == 1, "a new event is kept"
