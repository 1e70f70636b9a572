"""One health rule in every view: a space whose probe results stopped coming (the loop
stalled, its replica died) reads UNKNOWN with the reason "probe stale", in `status`, in
the status filter and in the environment picker alike."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from db.engine import Database
from sim.kube_standin import KubeStandIn
from tests.conftest import Org
from tests.support.factories import register_generic_space, set_space_status
from tests.support.server import Server

INTERVAL_S = 1.0
SPACE = """query($id: ID!) {
  space(id: $id) { status statusReason statusReasonCode lastProbe { ok error } }
}"""
PICKED = """query($status: [SpaceStatus!], $scalable: Boolean) {
  spaces(filter: {status: $status, scalable: $scalable}) { nodes { id } }
}"""
# Every view of one space in one query, so one read transaction: a snapshot.
EVERY_VIEW = """query($id: ID!) {
  space(id: $id) { status statusReason statusReasonCode lastProbe { ok error } }
  unknown: spaces(filter: {status: [UNKNOWN]}) { nodes { id } }
  active: spaces(filter: {status: [ACTIVE]}) { nodes { id } }
  scalable: spaces(filter: {scalable: true}) { nodes { id } }
}"""


@pytest.fixture(scope="module")
def server_env() -> dict[str, str]:
    return {"SPACEDOCK_PROBE_INTERVAL_S": str(INTERVAL_S), "SPACEDOCK_PROBE_TIMEOUT_S": "0.5"}


@pytest.fixture(scope="module")
def kube() -> Iterator[KubeStandIn]:
    with KubeStandIn() as standin:
        yield standin


async def space_of(org: Org, space_id: str) -> dict[str, Any]:
    space: dict[str, Any] = (await org.viewer.data(SPACE, {"id": space_id}))["space"]
    return space


async def picked(org: Org, **filter_: Any) -> set[str]:
    data = await org.viewer.data(PICKED, filter_)
    return {node["id"] for node in data["spaces"]["nodes"]}


async def until_status(org: Org, space_id: str, status: str) -> dict[str, Any]:
    deadline = asyncio.get_running_loop().time() + 10
    while (space := await space_of(org, space_id))["status"] != status:
        assert asyncio.get_running_loop().time() < deadline, space
        await asyncio.sleep(0.1)
    return space


async def stall_probes_of(server: Server, space_id: str) -> None:
    """What a dead replica leaves behind: a last result 3+ intervals old, and a lease that
    no live loop will pick up soon."""
    database = Database(server.backend.url)
    now = datetime.now(UTC)
    try:
        async with database.transaction() as session:
            await session.execute(
                sa.text(
                    "UPDATE spaces SET last_probe_at = :old, next_probe_at = :later WHERE id = :id"
                ),
                {
                    "old": (now - timedelta(seconds=INTERVAL_S * 4)).replace(tzinfo=None),
                    "later": (now + timedelta(hours=1)).replace(tzinfo=None),
                    "id": space_id,
                },
            )
    finally:
        await database.dispose()


async def test_a_stalled_space_reads_unknown_probe_stale_in_every_view(
    server: Server, org: Org, kube: KubeStandIn
) -> None:
    space = await register_generic_space(
        org.editor, server=kube.url + "/stale", ca=kube.ca_pem, token=kube.token
    )
    active = await until_status(org, space["id"], "ACTIVE")
    assert active["statusReason"] is None
    assert space["id"] in await picked(org, scalable=True)

    # A probe claimed just before the stall may still write its result after it; the
    # stall is made again until a snapshot shows it, and every view is read in that one.
    deadline = asyncio.get_running_loop().time() + 10
    while True:
        await stall_probes_of(server, space["id"])
        views = await org.viewer.data(EVERY_VIEW, {"id": space["id"]})
        if views["space"]["status"] != "ACTIVE":
            break
        assert asyncio.get_running_loop().time() < deadline, views
    stale = views["space"]
    assert stale["status"] == "UNKNOWN"
    assert stale["statusReason"] == "probe stale"
    assert stale["statusReasonCode"] == "PROBE_STALE"
    assert stale["lastProbe"]["ok"] is True  # the last result is still shown, just old
    in_view = {
        view: {node["id"] for node in views[view]["nodes"]}
        for view in ("unknown", "active", "scalable")
    }
    assert space["id"] in in_view["unknown"]
    assert space["id"] not in in_view["active"]
    assert space["id"] not in in_view["scalable"]


async def test_the_reason_names_the_hold_and_the_failure_behind_inactive(
    org: Org, kube: KubeStandIn
) -> None:
    space = await register_generic_space(
        org.editor, server=kube.url + "/reasons", ca=kube.ca_pem, token="not-the-token"
    )
    failing = await until_status(org, space["id"], "INACTIVE")
    assert failing["statusReason"].startswith("401 unauthorized")
    await set_space_status(org.editor, space["id"], "INACTIVE")
    assert (await space_of(org, space["id"]))["statusReason"] == "operator hold"
