"""CloudSpaces as a dashboard's table reads them, on both databases: filtered by phase and
host, searched by name, sorted by name, creation and phase, paged both ways, every order
walked page by page in both directions and equal to the list read in one page.

The CloudSpaces are written to the database as the reconciler leaves them, each in a
phase of its own and not due again: through the API they would move on while the test
reads them (and creating them needs a host with room). Everything read goes through the
server's GraphQL endpoint.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from core.common.ids import new_id
from db.cloudspace_tables import CloudSpace
from db.engine import Database
from tests.conftest import Org
from tests.support import factories as make
from tests.support.server import Server

LIST = """
query($first: Int, $after: String, $last: Int, $before: String, $filter: CloudSpaceFilter,
      $orderBy: CloudSpaceOrder) {
  cloudSpaces(first: $first, after: $after, last: $last, before: $before, filter: $filter,
              orderBy: $orderBy) {
    totalCount
    pageInfo { hasNextPage hasPreviousPage startCursor endCursor }
    edges { cursor node { id name phase createdAt hostSpace { id } } }
  }
}"""
# The lifecycle order PHASE sorts by (CloudSpacePhase's).
PHASES = ["PENDING", "PROVISIONING", "INSTALLING_FLUX", "READY", "FAILED", "DELETING"]
# name, phase, host (0 or 1): ties under every order (two READY, two FAILED, one name's
# prefix shared by three).
FLEET = [
    ("web-b", "READY", 0),
    ("web-a", "FAILED", 1),
    ("batch", "PENDING", 0),
    ("web-c", "READY", 1),
    ("ml", "INSTALLING_FLUX", 0),
    ("edge", "FAILED", 0),
    ("old", "DELETING", 1),
    ("new", "PROVISIONING", 1),
]


async def org_id_of(org: Org) -> str:
    org_id: str = (await org.viewer.data("{ viewer { org { id } } }"))["viewer"]["org"]["id"]
    return org_id


async def seed(server: Server, org_id: str, hosts: list[str]) -> None:
    """The fleet, created a minute apart, none due for the reconciler."""
    database = Database(server.backend.url)
    start = datetime.now(UTC) - timedelta(hours=1)
    never = datetime(2999, 1, 1, tzinfo=UTC)
    try:
        async with database.transaction() as session:
            for place, (name, phase, host) in enumerate(FLEET):
                session.add(
                    CloudSpace(
                        id=new_id("cs"),
                        org_id=org_id,
                        name=name,
                        host_space_id=hosts[host],
                        cpu=1,
                        memory_mib=512,
                        phase=phase,
                        step="refresh" if phase == "READY" else "begin",
                        next_attempt_at=never,
                        created_at=start + timedelta(minutes=place),
                    )
                )
    finally:
        await database.dispose()


@pytest.fixture
async def fleet(server: Server, org: Org) -> list[str]:
    hosts = [(await make.register_generic_space(org.editor))["id"] for _ in range(2)]
    await seed(server, await org_id_of(org), hosts)
    return hosts


async def page(org: Org, **variables: Any) -> dict[str, Any]:
    found: dict[str, Any] = (await org.viewer.data(LIST, variables))["cloudSpaces"]
    return found


async def walk(
    org: Org, order: dict[str, str] | None, size: int, forward: bool, **variables: Any
) -> list[dict[str, Any]]:
    """Every CloudSpace, page by page, forward (first/after) or back (last/before)."""
    found: list[dict[str, Any]] = []
    cursor = None
    while True:
        if forward:
            got = await page(org, first=size, after=cursor, orderBy=order, **variables)
            found += [edge["node"] for edge in got["edges"]]
            if not got["pageInfo"]["hasNextPage"]:
                return found
            cursor = got["pageInfo"]["endCursor"]
        else:
            got = await page(org, last=size, before=cursor, orderBy=order, **variables)
            found = [edge["node"] for edge in got["edges"]] + found
            if not got["pageInfo"]["hasPreviousPage"]:
                return found
            cursor = got["pageInfo"]["startCursor"]


def key(field: str, node: dict[str, Any]) -> Any:
    if field == "NAME":
        return node["name"]
    if field == "PHASE":
        return PHASES.index(node["phase"])
    return datetime.fromisoformat(node["createdAt"])


async def test_every_order_pages_both_ways_without_losing_or_repeating(
    org: Org, fleet: list[str]
) -> None:
    for field in ("NAME", "CREATED_AT", "PHASE"):
        for direction in ("ASC", "DESC"):
            order = {"field": field, "direction": direction}
            whole = [edge["node"] for edge in (await page(org, first=100, orderBy=order))["edges"]]
            assert len(whole) == len(FLEET)
            keys = [(key(field, node), node["id"]) for node in whole]
            assert keys == sorted(keys, reverse=direction == "DESC"), f"{order}: ties by id"
            for size in (1, 3):
                for forward in (True, False):
                    walked = await walk(org, order, size, forward)
                    assert [n["id"] for n in walked] == [n["id"] for n in whole], (order, size)
    by_phase = await page(org, first=100, orderBy={"field": "PHASE", "direction": "ASC"})
    phases = [edge["node"]["phase"] for edge in by_phase["edges"]]
    assert phases == [
        "PENDING",
        "PROVISIONING",
        "INSTALLING_FLUX",
        "READY",
        "READY",
        "FAILED",
        "FAILED",
        "DELETING",
    ]


async def test_filters_and_search_narrow_the_list_and_its_count(
    org: Org, other_org: Org, fleet: list[str]
) -> None:
    async def names(org: Org, **filter: Any) -> tuple[int, list[str]]:
        got = await page(
            org, first=100, filter=filter, orderBy={"field": "NAME", "direction": "ASC"}
        )
        return got["totalCount"], [edge["node"]["name"] for edge in got["edges"]]

    assert await names(org, phases=["READY", "FAILED"]) == (4, ["edge", "web-a", "web-b", "web-c"])
    assert await names(org, hostSpaceIds=[fleet[1]]) == (4, ["new", "old", "web-a", "web-c"])
    assert await names(org, search="WEB") == (3, ["web-a", "web-b", "web-c"])
    assert await names(org, search="-b", phases=["READY"]) == (1, ["web-b"])
    assert await names(org, search="%") == (0, []), "a wildcard is a character like any other"
    assert await names(org, search="e", hostSpaceIds=[fleet[0]], phases=["FAILED"]) == (
        1,
        ["edge"],
    )
    # Another org's host matches nothing, exactly like an id that never existed.
    assert await names(other_org, hostSpaceIds=[fleet[0]]) == (0, [])
    assert await names(org, hostSpaceIds=["spc_" + "0" * 30]) == (0, [])
    # Paged back under a filter: the same as forward.
    order = {"field": "CREATED_AT", "direction": "DESC"}
    narrowed = {"filter": {"phases": ["READY", "FAILED", "PENDING"]}}
    forward = await walk(org, order, 2, True, **narrowed)
    assert [n["id"] for n in forward] == [
        n["id"] for n in await walk(org, order, 2, False, **narrowed)
    ]
    assert [n["name"] for n in forward] == ["edge", "web-c", "batch", "web-a", "web-b"]


@pytest.mark.parametrize(
    ("variables", "says"),
    [
        ({"first": 2, "last": 2}, "not both"),
        ({"last": 101}, "last must be between 1 and 100"),
        ({"filter": {"search": "x" * 101}}, "at most 100 characters"),
        ({"filter": {"hostSpaceIds": [f"spc_{n:030x}" for n in range(101)]}}, "at most 100"),
        ({"before": "bm90LWEtY3Vyc29y"}, "before is not a cursor"),
    ],
)
async def test_bad_arguments_are_bad_user_input(
    org: Org, variables: dict[str, Any], says: str
) -> None:
    response = await org.viewer.call(LIST, variables)
    assert make.top_level_codes(response) == ["BAD_USER_INPUT"]
    assert says in response["errors"][0]["message"]


async def test_a_cursor_only_works_under_the_order_it_came_from(org: Org, fleet: list[str]) -> None:
    by_phase = await page(org, first=1, orderBy={"field": "PHASE", "direction": "ASC"})
    by_name = await page(org, first=1, orderBy={"field": "NAME", "direction": "ASC"})
    for after, order in (
        (by_phase["pageInfo"]["endCursor"], {"field": "NAME", "direction": "ASC"}),
        (by_name["pageInfo"]["endCursor"], {"field": "PHASE", "direction": "ASC"}),
        (by_name["pageInfo"]["endCursor"], None),
    ):
        response = await org.viewer.call(LIST, {"first": 1, "after": after, "orderBy": order})
        assert make.top_level_codes(response) == ["BAD_USER_INPUT"], order
