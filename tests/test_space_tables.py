"""Spaces as a dashboard's table reads them: sorted both ways, paged forward and back,
filtered and counted on the server.

Every order is walked page by page in both directions, with pages smaller than the
list, and must give exactly the list read in one page: no space lost or repeated at a
page boundary, ties (same status, same name, never probed) broken by id.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from datetime import UTC, datetime
from typing import Any

import pytest

from sim.kube_standin import KubeStandIn
from tests.conftest import Org
from tests.support import factories as make

SPACES = """
query($first: Int, $after: String, $last: Int, $before: String, $filter: SpaceFilter,
      $orderBy: SpaceOrder) {
  spaces(first: $first, after: $after, last: $last, before: $before, filter: $filter,
         orderBy: $orderBy) {
    totalCount
    pageInfo { hasNextPage hasPreviousPage startCursor endCursor }
    edges { cursor node { id name status held provider createdAt lastProbe { at } } }
  }
}"""
COUNTS = """
query($filter: SpaceFilter) {
  spaceCounts(filter: $filter) { total active inactive unknown held }
}"""
FIELDS = ("NAME", "STATUS", "CREATED_AT", "LAST_PROBE_AT")
NEVER = datetime(1970, 1, 1, tzinfo=UTC)
SEVERITY = {"INACTIVE": 0, "UNKNOWN": 1, "ACTIVE": 2}


@pytest.fixture(scope="module")
def server_env() -> dict[str, str]:
    # One probe per space (the first, at registration) and no more: the sort keys hold still.
    return {"SPACEDOCK_PROBE_INTERVAL_S": "3600"}


async def spaces(org: Org, **variables: Any) -> dict[str, Any]:
    connection: dict[str, Any] = (await org.viewer.data(SPACES, variables))["spaces"]
    return connection


async def fleet(org: Org) -> list[dict[str, Any]]:
    """Eleven spaces with ties under every order: three held (INACTIVE), the rest UNKNOWN;
    one name used twice (a deregistered space and its live successor)."""
    names = [f"node{n:02d}" for n in (7, 3, 9, 1, 5, 10, 2, 8, 4, 6)]
    made = [await make.register_generic_space(org.editor, name=name) for name in names]
    for space in made[:3]:
        await make.set_space_status(org.editor, space["id"], "INACTIVE")
    await make.deregister_space(org.admin, made[4]["id"])
    made.append(await make.register_generic_space(org.editor, name=made[4]["name"]))
    await every_space_probed(org)
    return made


async def every_space_probed(org: Org) -> None:
    """Waits (bounded) for the first probe of every space, so LAST_PROBE_AT holds still."""
    deadline = time.monotonic() + 20
    while True:
        nodes = await walk(org, None, 100, "forward")
        if all(node["lastProbe"] for node in nodes):
            return
        assert time.monotonic() < deadline, "the first probes did not all run"
        await asyncio.sleep(0.2)


def sort_key(field: str, node: dict[str, Any]) -> Any:
    if field == "NAME":
        return node["name"]
    if field == "STATUS":  # by severity: what needs a look first
        return SEVERITY[node["status"]]
    if field == "CREATED_AT":
        return datetime.fromisoformat(node["createdAt"])
    return datetime.fromisoformat(node["lastProbe"]["at"]) if node["lastProbe"] else NEVER


async def walk(
    org: Org,
    order: dict[str, str] | None,
    size: int,
    direction: str,
    space_filter: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Every space, page by page, forward (first/after) or back (last/before)."""
    found: list[dict[str, Any]] = []
    cursor = None
    pages = 0
    while True:
        if direction == "forward":
            page = await spaces(org, first=size, after=cursor, orderBy=order, filter=space_filter)
        else:
            page = await spaces(org, last=size, before=cursor, orderBy=order, filter=space_filter)
        info, nodes = page["pageInfo"], [edge["node"] for edge in page["edges"]]
        assert len(nodes) <= size
        edges = page["edges"]
        if edges:
            assert (info["startCursor"], info["endCursor"]) == (
                edges[0]["cursor"],
                edges[-1]["cursor"],
            )
        pages += 1
        if direction == "forward":
            assert info["hasPreviousPage"] is (pages > 1)
            found += nodes
            if not info["hasNextPage"]:
                return found
            cursor = info["endCursor"]
        else:
            assert info["hasNextPage"] is (pages > 1)
            found = nodes + found
            if not info["hasPreviousPage"]:
                return found
            cursor = info["startCursor"]


async def test_every_order_pages_both_ways_without_losing_or_repeating(org: Org) -> None:
    made = await fleet(org)
    live = {space["id"] for space in made} - {made[4]["id"]}
    for field in FIELDS:
        for direction in ("ASC", "DESC"):
            order = {"field": field, "direction": direction}
            whole = [
                edge["node"] for edge in (await spaces(org, first=100, orderBy=order))["edges"]
            ]
            assert {node["id"] for node in whole} == live, order
            keys = [(sort_key(field, node), node["id"]) for node in whole]
            assert keys == sorted(keys, reverse=direction == "DESC"), f"{order}: ties by id"
            for size in (1, 3, 4):
                forward = await walk(org, order, size, "forward")
                assert [n["id"] for n in forward] == [n["id"] for n in whole], (order, size)
                back = await walk(org, order, size, "back")
                assert [n["id"] for n in back] == [n["id"] for n in whole], (order, size)


async def test_ties_of_a_name_with_a_deregistered_space_are_broken_by_id(org: Org) -> None:
    first = await make.register_generic_space(org.editor, name="twin")
    await make.deregister_space(org.admin, first["id"])
    second = await make.register_generic_space(org.editor, name="twin")
    everything = {"includeDeregistered": True}
    for direction in ("ASC", "DESC"):
        order = {"field": "NAME", "direction": direction}
        forward = await walk(org, order, 1, "forward", everything)
        back = await walk(org, order, 1, "back", everything)
        expected = [first["id"], second["id"]]
        assert [n["id"] for n in forward] == [n["id"] for n in back]
        assert [n["id"] for n in forward] == (expected if direction == "ASC" else expected[::-1])


async def test_id_order_pages_back_from_the_end(org: Org) -> None:
    made = [await make.register_generic_space(org.editor) for _ in range(5)]
    ids = [space["id"] for space in made]
    assert [n["id"] for n in await walk(org, None, 2, "back")] == ids
    assert [n["id"] for n in await walk(org, None, 2, "forward")] == ids
    last_two = await spaces(org, last=2)
    assert [edge["node"]["id"] for edge in last_two["edges"]] == ids[-2:]
    assert last_two["pageInfo"]["hasPreviousPage"] is True
    assert last_two["totalCount"] == 5


@pytest.mark.parametrize(
    ("variables", "says"),
    [
        ({"first": 2, "last": 2}, "not both"),
        ({"last": 101}, "last must be between 1 and 100"),
        ({"last": 0}, "last must be between 1 and 100"),
        ({"before": "bm90LWEtY3Vyc29y"}, "before is not a cursor"),
    ],
)
async def test_bad_paging_arguments_are_bad_user_input(
    org: Org, variables: dict[str, Any], says: str
) -> None:
    response = await org.viewer.call(SPACES, variables)
    assert make.top_level_codes(response) == ["BAD_USER_INPUT"]
    assert says in response["errors"][0]["message"]


async def test_a_cursor_only_works_under_the_order_it_came_from(org: Org) -> None:
    for _ in range(2):
        await make.register_generic_space(org.editor)
    by_name = {"field": "NAME", "direction": "ASC"}
    named = await spaces(org, first=1, orderBy=by_name)
    plain = await spaces(org, first=1)
    mismatched = [
        {"first": 1, "after": named["pageInfo"]["endCursor"]},
        {"first": 1, "after": plain["pageInfo"]["endCursor"], "orderBy": by_name},
        {
            "first": 1,
            "after": named["pageInfo"]["endCursor"],
            "orderBy": {"field": "NAME", "direction": "DESC"},
        },
        {
            "first": 1,
            "after": named["pageInfo"]["endCursor"],
            "orderBy": {"field": "CREATED_AT", "direction": "ASC"},
        },
    ]
    for variables in mismatched:
        response = await org.viewer.call(SPACES, variables)
        assert make.top_level_codes(response) == ["BAD_USER_INPUT"], variables
    following = await spaces(org, first=1, after=named["pageInfo"]["endCursor"], orderBy=by_name)
    assert following["edges"], "the cursor works under its own order"
    # A cursor of the right order whose value is of another type (made by hand, or kept
    # from before STATUS sorted by severity) is refused, not handed to the database.
    some_id = named["edges"][0]["node"]["id"]
    for label, tag, value in (
        ("Space:STATUS:ASC", "text", "ACTIVE"),
        ("Space:CREATED_AT:ASC", "text", "yesterday"),
        ("Space:NAME:ASC", "int", 3),
    ):
        text = json.dumps([label, tag, value, some_id], separators=(",", ":"))
        forged = base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")
        field, direction = label.split(":")[1:]
        response = await org.viewer.call(
            SPACES,
            {"first": 1, "after": forged, "orderBy": {"field": field, "direction": direction}},
        )
        assert make.top_level_codes(response) == ["BAD_USER_INPUT"], label


# -- filters and counts ---------------------------------------------------------------------


async def until_probed(org: Org, space_ids: list[str], timeout_s: float = 30.0) -> None:
    query = "query($ids: [ID!]!) { nodes(ids: $ids) { ... on Space { lastProbe { at } } } }"
    deadline = time.monotonic() + timeout_s
    while True:
        found = (await org.viewer.data(query, {"ids": space_ids}))["nodes"]
        if all(node["lastProbe"] is not None for node in found):
            return
        assert time.monotonic() < deadline, f"not probed in {timeout_s:g} s: {found}"
        await asyncio.sleep(0.05)


async def test_each_filter_narrows_the_list_and_the_counts_alike(org: Org) -> None:
    account = await make.create_cloud_account(org.admin)
    aws = await make.register_cloud_space(org.admin, account_id=account["id"], name="Billing-EU")
    other_account = await make.create_cloud_account(org.admin)
    aws_other = await make.register_cloud_space(
        org.admin, account_id=other_account["id"], name="billing-us"
    )
    held = await make.register_generic_space(org.editor, name="db_primary")
    await make.set_space_status(org.editor, held["id"], "INACTIVE")
    plain = await make.register_generic_space(org.editor, name="dbXprimary")
    gone = await make.register_generic_space(org.editor, name="billing-old")
    await make.deregister_space(org.admin, gone["id"])
    # Each registration's first probe changes its status; the page and the counts must
    # read the same statuses, so compare only once those probes are in.
    await until_probed(org, [aws["id"], aws_other["id"], plain["id"]])

    cases: list[tuple[dict[str, Any], set[str]]] = [
        ({}, {aws["id"], aws_other["id"], held["id"], plain["id"]}),
        ({"search": "BILLING"}, {aws["id"], aws_other["id"]}),
        (
            {"search": "billing", "includeDeregistered": True},
            {aws["id"], aws_other["id"], gone["id"]},
        ),
        # "_" and "%" are the characters typed, not wildcards.
        ({"search": "_"}, {held["id"]}),
        ({"search": "%"}, set()),
        ({"providers": ["AWS"]}, {aws["id"], aws_other["id"]}),
        ({"providers": ["GENERIC", "GCP"]}, {held["id"], plain["id"]}),
        ({"cloudAccountIds": [account["id"]]}, {aws["id"]}),
        ({"cloudAccountIds": [account["id"], other_account["id"]]}, {aws["id"], aws_other["id"]}),
        ({"held": True}, {held["id"]}),
        ({"held": False}, {aws["id"], aws_other["id"], plain["id"]}),
        ({"held": False, "search": "db"}, {plain["id"]}),
        ({"status": ["INACTIVE"]}, {held["id"]}),
    ]
    for space_filter, expected in cases:
        page = await spaces(org, first=100, filter=space_filter)
        assert {edge["node"]["id"] for edge in page["edges"]} == expected, space_filter
        assert page["totalCount"] == len(expected), space_filter
        counts = (await org.viewer.data(COUNTS, {"filter": space_filter}))["spaceCounts"]
        nodes = [edge["node"] for edge in page["edges"]]
        assert counts == {
            "total": len(expected),
            "active": sum(node["status"] == "ACTIVE" for node in nodes),
            "inactive": sum(node["status"] == "INACTIVE" for node in nodes),
            "unknown": sum(node["status"] == "UNKNOWN" for node in nodes),
            "held": sum(node["held"] for node in nodes),
        }, space_filter


async def test_counts_without_a_filter_cover_every_registered_space(org: Org) -> None:
    made = [await make.register_generic_space(org.editor) for _ in range(4)]
    await make.set_space_status(org.editor, made[0]["id"], "INACTIVE")
    await make.deregister_space(org.admin, made[1]["id"])
    counts = (await org.viewer.data(COUNTS))["spaceCounts"]
    assert counts["total"] == 3
    assert counts["held"] == 1
    assert counts["inactive"] >= 1
    assert counts["active"] + counts["inactive"] + counts["unknown"] == 3


async def test_another_orgs_account_ids_filter_nothing_in(org: Org, other_org: Org) -> None:
    theirs = await make.create_cloud_account(other_org.admin)
    await make.register_cloud_space(other_org.admin, account_id=theirs["id"])
    await make.register_generic_space(org.editor)
    page = await spaces(org, first=100, filter={"cloudAccountIds": [theirs["id"]]})
    assert page["edges"] == [] and page["totalCount"] == 0
    counts = await org.viewer.data(COUNTS, {"filter": {"cloudAccountIds": [theirs["id"]]}})
    assert counts["spaceCounts"]["total"] == 0


async def test_an_overlong_search_is_bad_user_input(org: Org) -> None:
    for query in (SPACES, COUNTS):
        response = await org.viewer.call(query, {"filter": {"search": "x" * 101}})
        assert make.top_level_codes(response) == ["BAD_USER_INPUT"]
        assert "at most 100 characters" in response["errors"][0]["message"]


async def test_status_sorts_by_severity_not_by_its_words(org: Org) -> None:
    """ASC puts what needs a look first: INACTIVE, UNKNOWN, then ACTIVE (alphabetically,
    ACTIVE came first and a table sorted by status buried its failures)."""
    with KubeStandIn() as cluster:
        config = {
            "clusterName": make.unique("standin"),
            "server": cluster.url,
            "caCert": cluster.ca_pem,
            "serviceAccountToken": cluster.token,
        }
        payload = await org.editor.mutate(
            make.REGISTER_SPACE,
            {"input": {"name": "a-healthy", "provider": "GENERIC", "config": config}},
        )
        healthy = make.succeeded(payload)["space"]["id"]
        unreachable = (await make.register_generic_space(org.editor, name="b-unreachable"))["id"]
        held = (await make.register_generic_space(org.editor, name="c-held"))["id"]
        await make.set_space_status(org.editor, held, "INACTIVE")
        await every_space_probed(org)
    for direction, expected in (
        ("ASC", [held, unreachable, healthy]),
        ("DESC", [healthy, unreachable, held]),
    ):
        order = {"field": "STATUS", "direction": direction}
        nodes = [edge["node"] for edge in (await spaces(org, first=10, orderBy=order))["edges"]]
        assert [node["id"] for node in nodes] == expected, [n["status"] for n in nodes]
        assert [n["id"] for n in await walk(org, order, 1, "back")] == expected
