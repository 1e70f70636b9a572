"""Live data a normalized client cache (Apollo's InMemoryCache, urql's graphcache) merges
without a refetch, on both databases: every event carries the object it is about with its
id and current state; a probe result is a Node whose `space` holds that result; a space
and its events name their reasons alike; every DateTime has one shape; a stale id in a
subscription's `spaceIds` is reported once and skipped while the others stream; and the
recent-events log pages back from the newest event.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from sim.kube_standin import KubeStandIn
from tests.conftest import Org
from tests.support import factories as make
from tests.support.graphql import RawSocket
from tests.support.live import (
    Received,
    next_item,
    subscribers,
    subscribers_reach,
    subscription,
)
from tests.support.server import Server

WAIT_S = 40.0
# The one shape of every DateTime: UTC, milliseconds, Z (JavaScript's toISOString()).
DATETIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
SPACE = "id status statusReason statusReasonCode reason reasonCode held consecutiveFailures"
CHANGED = f"""
subscription($ids: [ID!]) {{
  spaceStatusChanged(spaceIds: $ids) {{
    id spaceId status at reason reasonCode statusReason statusReasonCode
    space {{ {SPACE} }}
  }}
}}"""
PROBED = f"""
subscription($ids: [ID!]!) {{
  spaceProbed(spaceIds: $ids) {{
    id spaceId consecutiveFailures
    result {{ at ok version }}
    space {{ {SPACE} lastProbe {{ at ok version }} }}
  }}
}}"""
PROBE_NODE = """
query($id: ID!) {
  node(id: $id) {
    __typename id
    ... on ProbeEvent { spaceId consecutiveFailures result { at ok } space { id } }
  }
}"""
RECENT = """
query($last: Int, $before: String, $first: Int, $after: String) {
  statusEvents(last: $last, before: $before, first: $first, after: $after) {
    totalCount
    pageInfo { hasNextPage hasPreviousPage startCursor endCursor }
    nodes { id spaceId reasonCode }
  }
}"""


@pytest.fixture(scope="module")
def server_env() -> dict[str, str]:
    # One probe at registration and then one an hour: the test makes each one it awaits
    # (lifting a hold probes at once); failures never reach the threshold, so every status
    # event comes from the test.
    return {
        "SPACEDOCK_PROBE_INTERVAL_S": "3600",
        "SPACEDOCK_PROBE_TIMEOUT_S": "2",
        "SPACEDOCK_PROBE_FAILURE_THRESHOLD": "1000000",
    }


@pytest.fixture
def cluster() -> Iterator[KubeStandIn]:
    with KubeStandIn() as standin:
        yield standin


async def register_on(org: Org, cluster: KubeStandIn) -> str:
    space_id: str = (await make.register_on_standin(org.editor, cluster))["id"]
    return space_id


@asynccontextmanager
async def listening(
    server: Server, org: Org, query: str, variables: dict[str, Any]
) -> AsyncIterator[Received]:
    """A viewer's subscription, once the server streams it (what is published from then on
    reaches it)."""
    before = await subscribers(server)
    async with subscription(org.viewer, query, variables) as received:
        await subscribers_reach(server, before + 1)
        yield received


async def first_probe_of(org: Org, space_id: str) -> None:
    """Waits (bounded) for the probe a registration makes, so the next comes from the test."""
    query = "query($id: ID!) { space(id: $id) { lastProbe { at } } }"
    async with asyncio.timeout(WAIT_S):
        while True:
            if (await org.viewer.data(query, {"id": space_id}))["space"]["lastProbe"]:
                return
            await asyncio.sleep(0.1)


def assert_datetimes(value: Any) -> None:
    """Every DateTime in an answer has the one shape (the fields named `at`)."""
    if isinstance(value, dict):
        for key, inner in value.items():
            if key == "at" and inner is not None:
                assert DATETIME.fullmatch(inner), inner
            assert_datetimes(inner)
    elif isinstance(value, list):
        for inner in value:
            assert_datetimes(inner)


async def test_a_status_event_carries_its_space_as_it_is_now(server: Server, org: Org) -> None:
    space = await make.register_generic_space(org.editor)
    async with listening(server, org, CHANGED, {"ids": [space["id"]]}) as received:
        await make.set_space_status(org.editor, space["id"], "INACTIVE")
        held = await next_item(received)
        await make.set_space_status(org.editor, space["id"], "ACTIVE")
        lifted = await next_item(received)
    assert held["space"]["id"] == held["spaceId"] == space["id"]
    assert (held["status"], held["space"]["status"], held["space"]["held"]) == (
        "INACTIVE",
        "INACTIVE",
        True,
    )
    assert held["reasonCode"] == held["statusReasonCode"] == "OPERATOR_HOLD"
    assert held["reason"] == held["statusReason"] == "operator hold"
    # The space reads its reason under both names too, as the event does.
    assert held["space"]["statusReason"] == held["space"]["reason"] == "operator hold"
    assert held["space"]["statusReasonCode"] == held["space"]["reasonCode"] == "OPERATOR_HOLD"
    assert lifted["space"]["held"] is False and lifted["reasonCode"] == "HOLD_LIFTED"
    assert_datetimes([held, lifted])
    # The same event, read back as a node, has the same shape of time.
    node = await org.viewer.data(
        "query($id: ID!) { node(id: $id) { ... on SpaceStatusEvent { at } } }", {"id": held["id"]}
    )
    assert node["node"]["at"] == held["at"]


async def test_a_probe_event_is_a_node_whose_space_holds_that_result(
    server: Server, org: Org, other_org: Org, cluster: KubeStandIn
) -> None:
    space_id = await register_on(org, cluster)
    await first_probe_of(org, space_id)
    async with listening(server, org, PROBED, {"ids": [space_id]}) as received:
        # Hold and lift: the lift probes at once, so a result arrives while we listen.
        await make.set_space_status(org.editor, space_id, "INACTIVE")
        await make.set_space_status(org.editor, space_id, "ACTIVE")
        event = await next_item(received)
    assert event["spaceId"] == event["space"]["id"] == space_id
    assert event["id"].startswith("prb_")
    assert event["result"]["ok"] is True and event["result"]["version"] == "v1.31.2"
    # The space as the cache merges it: this result is its last probe.
    assert event["space"]["lastProbe"] == event["result"]
    assert event["space"]["consecutiveFailures"] == event["consecutiveFailures"] == 0
    assert event["space"]["status"] == "ACTIVE"
    assert_datetimes(event)

    found = (await org.viewer.data(PROBE_NODE, {"id": event["id"]}))["node"]
    assert found == {
        "__typename": "ProbeEvent",
        "id": event["id"],
        "spaceId": space_id,
        "consecutiveFailures": 0,
        "result": {"at": event["result"]["at"], "ok": True},
        "space": {"id": space_id},
    }
    assert (await other_org.viewer.data(PROBE_NODE, {"id": event["id"]}))["node"] is None
    # A newer probe replaces it: the old result's id names nothing any more.
    async with listening(server, org, PROBED, {"ids": [space_id]}) as received:
        await make.set_space_status(org.editor, space_id, "INACTIVE")
        await make.set_space_status(org.editor, space_id, "ACTIVE")
        newer = await next_item(received)
    assert newer["id"] != event["id"]
    assert (await org.viewer.data(PROBE_NODE, {"id": event["id"]}))["node"] is None
    assert (await org.viewer.data(PROBE_NODE, {"id": newer["id"]}))["node"]["id"] == newer["id"]


@asynccontextmanager
async def raw_subscription(
    server: Server, org: Org, query: str, variables: dict[str, Any]
) -> AsyncIterator[RawSocket]:
    async with RawSocket(server.ws_url, org.tokens["viewer"]) as socket:
        assert (await socket.init() or {}).get("type") == "connection_ack"
        payload = {"query": query, "variables": variables}
        await socket.send({"id": "1", "type": "subscribe", "payload": payload})
        yield socket


async def test_a_stale_id_is_reported_once_and_the_others_keep_streaming(
    server: Server, org: Org
) -> None:
    first = (await make.register_generic_space(org.editor))["id"]
    second = (await make.register_generic_space(org.editor))["id"]
    stale = "spc_" + "0" * 30
    ids = [first, stale, second]
    before = await subscribers(server)
    async with raw_subscription(server, org, CHANGED, {"ids": ids}) as socket:
        report = await socket.receive()
        assert report is not None and report["type"] == "next"
        [error] = report["payload"]["errors"]
        assert report["payload"]["data"] is None
        assert error["extensions"] == {"code": "NOT_FOUND", "spaceIds": [stale]}
        assert error["message"] == (f"No space with id {stale!r}: skipped; following the other 2.")
        await subscribers_reach(server, before + 1)
        for space_id in (first, second, first):
            await make.set_space_status(org.editor, space_id, "INACTIVE")
            await make.set_space_status(org.editor, space_id, "ACTIVE")
        delivered: list[str] = []
        while len(delivered) < 6:
            message = await socket.receive()
            assert message is not None and message["type"] == "next", message
            assert "errors" not in message["payload"], "the report came once"
            delivered.append(message["payload"]["data"]["spaceStatusChanged"]["spaceId"])
        assert delivered == [first, first, second, second, first, first]


async def test_foreign_and_unknown_ids_are_reported_alike(
    server: Server, org: Org, other_org: Org
) -> None:
    """Another org's space reads exactly as an id that never existed, in both
    subscriptions; and with nothing left to follow, the subscription ends after the report."""
    mine = (await make.register_generic_space(org.editor))["id"]
    foreign = (await make.register_generic_space(other_org.editor))["id"]
    unknown = foreign[:-6] + "abcdef"  # same shape, same age: nothing sets it apart
    reports: dict[str, list[dict[str, Any]]] = {}
    for stranger in (foreign, unknown):
        for query in (CHANGED, PROBED):
            async with raw_subscription(server, org, query, {"ids": [mine, stranger]}) as socket:
                report = await socket.receive()
                assert report is not None
                [error] = report["payload"]["errors"]
                error["message"] = error["message"].replace(stranger, "<id>")
                error["extensions"]["spaceIds"] = ["<id>" for _ in error["extensions"]["spaceIds"]]
                reports.setdefault(stranger, []).append(report)
            async with raw_subscription(server, org, query, {"ids": [stranger]}) as socket:
                alone = await socket.receive()
                ended = await socket.receive()
                assert (
                    alone is not None
                    and alone["payload"]["errors"][0]["extensions"]["code"] == "NOT_FOUND"
                )
                assert ended == {"id": "1", "type": "complete"}
    assert reports[foreign] == reports[unknown]


async def test_the_recent_events_log_pages_back_from_the_newest(org: Org) -> None:
    spaces = [(await make.register_generic_space(org.editor))["id"] for _ in range(3)]
    for space_id in spaces:
        await make.set_space_status(org.editor, space_id, "INACTIVE")
    forward = (await org.viewer.data(RECENT, {"first": 100}))["statusEvents"]
    everything = [event["id"] for event in forward["nodes"]]
    assert len(everything) == 6
    newest = (await org.viewer.data(RECENT, {"last": 2}))["statusEvents"]
    assert [event["id"] for event in newest["nodes"]] == everything[-2:], "oldest first in a page"
    assert newest["pageInfo"]["hasPreviousPage"] is True
    assert newest["pageInfo"]["hasNextPage"] is False
    assert newest["totalCount"] == 6
    walked, page = list(newest["nodes"]), newest
    while page["pageInfo"]["hasPreviousPage"]:
        before = page["pageInfo"]["startCursor"]
        page = (await org.viewer.data(RECENT, {"last": 2, "before": before}))["statusEvents"]
        assert page["pageInfo"]["hasNextPage"] is True
        walked = page["nodes"] + walked
    assert [event["id"] for event in walked] == everything
    # An event's id is a cursor too, as for after.
    by_id = (await org.viewer.data(RECENT, {"last": 1, "before": everything[3]}))["statusEvents"]
    assert [event["id"] for event in by_id["nodes"]] == [everything[2]]
    mixed = await org.viewer.call(RECENT, {"last": 1, "after": everything[0]})
    assert make.top_level_codes(mixed) == ["BAD_USER_INPUT"]


async def test_every_datetime_has_one_shape(org: Org) -> None:
    space = await make.register_generic_space(org.editor)
    data = await org.admin.data(
        """query($id: ID!) {
          space(id: $id) { createdAt deregisteredAt lastProbe { at } statusEvents { at } }
          apiTokens(first: 5) { nodes { createdAt expiresAt lastUsedAt } }
          auditEvents(first: 5) { nodes { at } }
        }""",
        {"id": space["id"]},
    )
    found: list[str] = []

    def collect(value: Any) -> None:
        if isinstance(value, dict):
            for inner in value.values():
                collect(inner)
        elif isinstance(value, list):
            for inner in value:
                collect(inner)
        elif isinstance(value, str):
            found.append(value)

    collect(data)
    assert found, data
    assert all(DATETIME.fullmatch(text) for text in found), found
