"""Live columns and catch-up, as a dashboard uses them: statusEvents pages an org's events
oldest first from any event id, so a client whose subscription dropped resubscribes, reads
from the last id it saw and misses nothing; spaceStatusChanged follows a page of spaces
(at most 100) and spaceProbed streams their probe results."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from gql.transport.exceptions import TransportQueryError

from sim.kube_standin import KubeStandIn
from tests.conftest import Org
from tests.support import factories as make
from tests.support.live import next_item, subscription
from tests.support.server import Server

WAIT_S = 40.0
STATUS_EVENTS = """
query($first: Int, $after: String, $ids: [ID!]) {
  statusEvents(first: $first, after: $after, spaceIds: $ids) {
    totalCount
    pageInfo { hasNextPage hasPreviousPage endCursor }
    edges { cursor node { id spaceId status reason reasonCode } }
  }
}"""
CHANGED = """
subscription($ids: [ID!]) {
  spaceStatusChanged(spaceIds: $ids) { id spaceId status reasonCode }
}"""
RESUMED = """
subscription($ids: [ID!], $after: String) {
  spaceStatusChanged(spaceIds: $ids, after: $after) { id spaceId status reasonCode }
}"""
PROBED = """
subscription($ids: [ID!]!) {
  spaceProbed(spaceIds: $ids) {
    spaceId consecutiveFailures result { at ok version latencyMs error errorCode }
  }
}"""


@pytest.fixture(scope="module")
def server_env() -> dict[str, str]:
    # Failing probes never reach the threshold: every status event comes from the test.
    return {
        "SPACEDOCK_PROBE_INTERVAL_S": "0.3",
        "SPACEDOCK_PROBE_TIMEOUT_S": "1.5",
        "SPACEDOCK_PROBE_FAILURE_THRESHOLD": "1000000",
    }


@pytest.fixture
def cluster() -> Iterator[KubeStandIn]:
    with KubeStandIn() as k:
        yield k


async def all_events(org: Org, after: str | None = None, size: int = 3) -> list[dict[str, Any]]:
    """Every event after `after`, page by page."""
    found: list[dict[str, Any]] = []
    while True:
        page = (await org.viewer.data(STATUS_EVENTS, {"first": size, "after": after}))[
            "statusEvents"
        ]
        found += [edge["node"] for edge in page["edges"]]
        if not page["pageInfo"]["hasNextPage"]:
            return found
        after = page["pageInfo"]["endCursor"]


async def test_status_events_page_oldest_first_and_resolve_as_nodes(
    org: Org, other_org: Org
) -> None:
    first = await make.register_generic_space(org.editor)
    second = await make.register_generic_space(org.editor)
    await make.set_space_status(org.editor, first["id"], "INACTIVE")
    await make.register_generic_space(other_org.editor)

    events = await all_events(org, size=1)
    assert [(e["spaceId"], e["reasonCode"]) for e in events] == [
        (first["id"], "REGISTERED"),
        (second["id"], "REGISTERED"),
        (first["id"], "OPERATOR_HOLD"),
    ]
    assert len({e["id"] for e in events}) == 3
    # An event's id is a cursor too: reading from it gives what followed.
    assert await all_events(org, after=events[0]["id"]) == events[1:]
    only = await org.viewer.data(STATUS_EVENTS, {"ids": [second["id"]]})
    assert [e["node"]["id"] for e in only["statusEvents"]["edges"]] == [events[1]["id"]]
    node = await org.viewer.data(
        "query($id: ID!) { node(id: $id) { __typename id ... on SpaceStatusEvent { status } } }",
        {"id": events[2]["id"]},
    )
    assert node["node"] == {
        "__typename": "SpaceStatusEvent",
        "id": events[2]["id"],
        "status": "INACTIVE",
    }
    theirs = await other_org.viewer.data(
        "query($id: ID!) { node(id: $id) { id } }", {"id": events[2]["id"]}
    )
    assert theirs["node"] is None, "another org's event reads as unknown"


async def live(server: Server) -> None:
    """Waits (bounded) until the server holds a subscription: this module's tests run one
    at a time, so it is ours."""
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while server.metric("spacedock_event_subscribers") < 1:
        assert asyncio.get_running_loop().time() < deadline, "the subscription never started"
        await asyncio.sleep(0.02)


async def test_catch_up_after_a_dropped_subscription_has_no_gap_and_no_repeat(
    server: Server, org: Org
) -> None:
    spaces = [await make.register_generic_space(org.editor) for _ in range(2)]
    ids = [space["id"] for space in spaces]
    async with subscription(org.viewer, CHANGED, {"ids": ids}) as received:
        for _ in range(50):  # live once it has delivered an event
            await make.set_space_status(org.editor, ids[0], "INACTIVE")
            await make.set_space_status(org.editor, ids[0], "ACTIVE")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(received.get(), 0.5)
                break
        await make.set_space_status(org.editor, ids[1], "INACTIVE")
        while (seen := await next_item(received))["spaceId"] != ids[1]:
            pass
    # The connection dropped; events happen meanwhile.
    await make.set_space_status(org.editor, ids[1], "ACTIVE")
    await make.set_space_status(org.editor, ids[0], "INACTIVE")
    async with subscription(org.viewer, CHANGED, {"ids": ids}) as received:
        # Resubscribed first, so nothing can fall between the catch-up read and the stream.
        await live(server)
        missed = await all_events(org, after=seen["id"], size=1)
        assert [(e["spaceId"], e["reasonCode"]) for e in missed][:2] == [
            (ids[1], "HOLD_LIFTED"),
            (ids[0], "OPERATOR_HOLD"),
        ]
        await make.set_space_status(org.editor, ids[0], "ACTIVE")
        streamed: list[dict[str, Any]] = []
        while not streamed or streamed[-1]["reasonCode"] != "HOLD_LIFTED":
            streamed.append(await next_item(received))
    everything = [e["id"] for e in await all_events(org)]
    after_seen = everything[everything.index(seen["id"]) + 1 :]
    caught_up = [e["id"] for e in missed] + [e["id"] for e in streamed]
    assert sorted(caught_up) == after_seen, "every event after the last seen, once"


async def test_resuming_with_after_sends_what_was_missed_then_live_events_each_once(
    org: Org,
) -> None:
    ids = [(await make.register_generic_space(org.editor))["id"] for _ in range(2)]
    seen = [e for e in await all_events(org, size=100) if e["spaceId"] in ids][-1]["id"]

    async def flips(space_id: str, times: int) -> None:
        for _ in range(times):
            await make.set_space_status(org.editor, space_id, "INACTIVE")
            await make.set_space_status(org.editor, space_id, "ACTIVE")

    await flips(ids[0], 3)  # missed while away
    racing = asyncio.create_task(flips(ids[1], 5))  # written while the resubscribe starts
    async with subscription(org.viewer, RESUMED, {"ids": ids, "after": seen}) as received:
        await racing
        expected = [
            e["id"] for e in await all_events(org, after=seen, size=100) if e["spaceId"] in ids
        ]
        assert len(expected) == 16
        got = [(await next_item(received))["id"] for _ in expected]
        assert len(set(got)) == len(got), "an event came twice"
        assert sorted(got) == expected, "every event after the one seen"
        # Nothing else is queued: the next frame is the next change.
        await make.set_space_status(org.editor, ids[0], "INACTIVE")
        latest = [e for e in await all_events(org, after=expected[-1], size=100)]
        assert (await next_item(received))["id"] == latest[-1]["id"]

    async with subscription(org.viewer, RESUMED, {"ids": ids, "after": "nonsense"}) as received:
        refused = await asyncio.wait_for(received.get(), WAIT_S)
    assert isinstance(refused, TransportQueryError)
    assert [e["extensions"]["code"] for e in refused.errors or []] == ["BAD_USER_INPUT"]


async def test_following_a_page_of_spaces_is_limited_to_100(org: Org, other_org: Org) -> None:
    space = await make.register_generic_space(org.editor)
    theirs = await make.register_generic_space(other_org.editor)
    for query in (CHANGED, PROBED):
        async with subscription(
            org.viewer, query, {"ids": [space["id"]] + [f"spc_{n:030x}" for n in range(100)]}
        ) as received:
            refused = await asyncio.wait_for(received.get(), WAIT_S)
        assert isinstance(refused, TransportQueryError)
        assert [e["extensions"]["code"] for e in refused.errors or []] == ["BAD_USER_INPUT"]
        assert "at most 100" in (refused.errors or [{}])[0]["message"]
        async with subscription(
            org.viewer, query, {"ids": [space["id"], theirs["id"]]}
        ) as received:
            foreign = await asyncio.wait_for(received.get(), WAIT_S)
        assert isinstance(foreign, TransportQueryError)
        assert [e["extensions"]["code"] for e in foreign.errors or []] == ["NOT_FOUND"]
    response = await org.viewer.call(STATUS_EVENTS, {"ids": [space["id"]] * 101})
    assert make.top_level_codes(response) == ["BAD_USER_INPUT"]


async def test_space_probed_streams_the_probe_results_of_the_followed_spaces(
    org: Org, cluster: KubeStandIn
) -> None:
    def config() -> dict[str, Any]:
        return {
            "clusterName": make.unique("standin"),
            "server": f"{cluster.url}/{make.unique('c')}",
            "caCert": cluster.ca_pem,
            "serviceAccountToken": cluster.token,
        }

    made = []
    for _ in range(2):
        payload = await org.editor.mutate(
            make.REGISTER_SPACE,
            {"input": {"name": make.unique("space"), "provider": "GENERIC", "config": config()}},
        )
        made.append(make.succeeded(payload)["space"]["id"])
    followed, other = made
    async with subscription(org.viewer, PROBED, {"ids": [followed]}) as received:
        results = [await next_item(received) for _ in range(3)]
        cluster.status_code = 403
        while (failed := await next_item(received))["result"]["ok"]:
            pass
    assert {r["spaceId"] for r in results} == {followed}, "only the followed space"
    assert all(r["result"]["ok"] and r["result"]["version"] == "v1.31.2" for r in results)
    assert [r["result"]["at"] for r in results] == sorted({r["result"]["at"] for r in results})
    assert failed["spaceId"] == followed
    assert failed["consecutiveFailures"] >= 1
    assert failed["result"]["errorCode"] == "FORBIDDEN"
    assert failed["result"]["error"].startswith("403 forbidden")
    assert other not in {r["spaceId"] for r in [*results, failed]}
