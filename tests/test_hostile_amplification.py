"""Issue 7: one small query cannot fan out into unbounded live cluster calls.

This module's server allows 3 live calls per operation, 2 of them at once, 3 at once
in the whole process, and 50 live results per operation. A query asking for the namespaces of five spaces (or of
one space under five aliases) makes exactly 3 calls; the other fields answer
PROVIDER_ERROR "too many live calls in one request" and the rest of the query still
answers. The stand-in counts the calls and how many ran at once, per operation and
across two operations, and a mutation of several createNamespace fields spends the
same budget.

Subscriptions (issue 18): the runs of one event for every subscription a credential
holds share one such budget, and a subscription may not select a kubeconfig at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from typing import Any

import pytest
import websockets

from sim.kube_standin import HostileAnswer, KubeStandIn
from tests.conftest import Org
from tests.support import factories as make
from tests.support.attack import HANG, PROTOCOL, converse, subscribe
from tests.support.server import Server

TOO_MANY = "too many live calls in one request"
LIST = "GET /api/v1/namespaces"
ALL_NAMESPACES = "{ spaces(first: 50) { nodes { id name namespaces { name } } } }"


@pytest.fixture(scope="module")
def server_env() -> dict[str, str]:
    return {
        "SPACEDOCK_PROBE_INTERVAL_S": "3600",
        "SPACEDOCK_LIVE_CALLS_PER_REQUEST": "3",
        "SPACEDOCK_LIVE_CALL_CONCURRENCY": "2",
        "SPACEDOCK_LIVE_CALLS_PER_SERVER": "3",
        "SPACEDOCK_LIVE_ITEMS_PER_REQUEST": "50",
        "SPACEDOCK_LIVE_FIELD_TIMEOUT_S": "20",  # slow calls queue for slots here, by design
    }


@pytest.fixture(scope="module")
def standin() -> Iterator[KubeStandIn]:
    with KubeStandIn() as k:
        yield k


@pytest.fixture
def cluster(standin: KubeStandIn) -> Iterator[KubeStandIn]:
    standin.most_calls_in_flight.clear()
    yield standin
    standin.heal()


def aliased(space_id: str, count: int) -> str:
    fields = " ".join(
        f'n{i}: space(id: "{space_id}") {{ namespaces {{ name }} }}' for i in range(count)
    )
    return f"{{ {fields} viewer {{ role }} }}"


def split(response: dict[str, Any]) -> tuple[int, list[dict[str, Any]]]:
    """How many namespace fields answered, and the errors of those that did not."""
    return len(
        [n for n in response["data"]["spaces"]["nodes"] if n["namespaces"] is not None]
    ), response["errors"] or []


async def test_a_list_of_spaces_makes_at_most_the_budgeted_calls(
    org: Org, cluster: KubeStandIn
) -> None:
    spaces = [await make.register_on_standin(org.admin, cluster) for _ in range(5)]
    before = cluster.requests[LIST]

    response = await org.viewer.call(ALL_NAMESPACES)

    answered, errors = split(response)
    assert (answered, len(errors)) == (3, 2)
    assert {node["name"] for node in response["data"]["spaces"]["nodes"]} == {
        s["name"] for s in spaces
    }, "the rest of the query answers"
    for error in errors:
        assert error["extensions"]["code"] == "PROVIDER_ERROR"
        assert error["message"].startswith(TOO_MANY)
        assert error["path"][-1] == "namespaces"
    assert cluster.requests[LIST] - before == 3


async def test_aliases_of_one_field_share_the_budget(org: Org, cluster: KubeStandIn) -> None:
    space = await make.register_on_standin(org.admin, cluster)
    before = cluster.requests[LIST]

    response = await org.viewer.call(aliased(space["id"], 5))

    answered = [k for k, v in response["data"].items() if k != "viewer" and v["namespaces"]]
    assert len(answered) == 3
    assert response["data"]["viewer"] == {"role": "VIEWER"}
    assert [e["message"].split(":")[0] for e in response["errors"]] == [TOO_MANY] * 2
    assert cluster.requests[LIST] - before == 3


async def test_calls_of_one_operation_run_at_most_two_at_once(
    org: Org, cluster: KubeStandIn
) -> None:
    space = await make.register_on_standin(org.admin, cluster)
    cluster.delay_s = 0.5
    response = await org.viewer.call(aliased(space["id"], 3))
    assert not response["errors"], response["errors"]
    assert cluster.most_calls_in_flight[LIST] == 2


async def test_operations_share_the_servers_slots(org: Org, cluster: KubeStandIn) -> None:
    space = await make.register_on_standin(org.admin, cluster)
    cluster.delay_s = 0.5
    responses = await asyncio.gather(*(org.viewer.call(aliased(space["id"], 2)) for _ in range(3)))
    assert all(not r["errors"] for r in responses), [r["errors"] for r in responses]
    assert cluster.most_calls_in_flight[LIST] == 3, (
        "three operations of two calls each: three at once"
    )


async def test_each_request_has_a_budget_of_its_own(org: Org, cluster: KubeStandIn) -> None:
    space = await make.register_on_standin(org.admin, cluster)
    for _ in range(3):
        response = await org.viewer.call(aliased(space["id"], 3))
        assert not response["errors"], response["errors"]


async def test_creates_in_one_mutation_spend_the_same_budget(
    org: Org, cluster: KubeStandIn
) -> None:
    space = await make.register_on_standin(org.admin, cluster)
    names = [make.unique("burst") for _ in range(5)]
    fields = " ".join(
        f'c{i}: createNamespace(input: {{spaceId: "{space["id"]}", name: "{name}"}}) '
        f"{{ namespace {{ name }} {make.USER_ERRORS} }}"
        for i, name in enumerate(names)
    )
    data = await org.editor.data(f"mutation {{ {fields} }}")

    created = [data[f"c{i}"]["namespace"] for i in range(5)]
    assert [c["name"] if c else None for c in created] == [*names[:3], None, None]
    for i in (3, 4):
        [error] = data[f"c{i}"]["userErrors"]
        assert (error["code"], error["message"].split(":")[0]) == ("PROVIDER_ERROR", TOO_MANY)
    assert set(names[:3]) <= set(cluster.namespaces) and not set(names[3:]) & set(
        cluster.namespaces
    )


async def test_results_of_one_operation_are_budgeted_too(org: Org, cluster: KubeStandIn) -> None:
    space = await make.register_on_standin(org.admin, cluster)
    twenty = {"items": [{"metadata": {"name": f"n{i}"}} for i in range(20)]}
    cluster.answers[LIST] = HostileAnswer(json.dumps(twenty).encode())

    response = await org.viewer.call(aliased(space["id"], 3))

    answered = [k for k, v in response["data"].items() if k != "viewer" and v["namespaces"]]
    assert len(answered) == 2, "20 + 20 fit in 50; the third 20 do not"
    [error] = response["errors"]
    assert error["extensions"]["code"] == "PROVIDER_ERROR"
    assert error["message"].startswith("too many live results in one request")
    assert "SPACEDOCK_LIVE_ITEMS_PER_REQUEST" in error["message"]


# -- subscriptions (issue 18) -------------------------------------------------------------


def watching(alias: str) -> str:
    """A status subscription of one space with its namespaces; each alias is a document
    of its own, so a run of its own for every event."""
    return (
        f"subscription($id: ID) {{ {alias}: spaceStatusChanged(spaceId: $id) "
        "{ spaceId space { namespaces { name } } } }"
    )


async def subscribers(server: Server) -> int:
    return int(await asyncio.to_thread(server.metric, "spacedock_event_subscribers"))


async def probed(org: Org, space_id: str) -> None:
    """Until the space's first probe has answered, so no probe event comes later."""
    for _ in range(200):
        found = await org.admin.data(
            "query($id: ID!) { space(id: $id) { lastProbe { ok } } }", {"id": space_id}
        )
        if found["space"]["lastProbe"] is not None:
            return
        await asyncio.sleep(0.05)
    pytest.fail("the space was never probed")


async def test_an_events_live_calls_are_budgeted_per_credential_across_subscriptions(
    server: Server, org: Org, cluster: KubeStandIn
) -> None:
    space = await make.register_on_standin(org.admin, cluster)
    await probed(org, space["id"])
    variables = {"id": space["id"]}
    async with contextlib.AsyncExitStack() as stack:
        sockets = {}
        for role in ("viewer", "editor"):
            ws = await stack.enter_async_context(
                websockets.connect(server.ws_url, subprotocols=[PROTOCOL])
            )
            init = {"Authorization": f"Bearer {org.tokens[role]}"}
            await ws.send(json.dumps({"type": "connection_init", "payload": init}))
            assert json.loads(await asyncio.wait_for(ws.recv(), HANG))["type"] == "connection_ack"
            sockets[role] = ws
        before = await subscribers(server)
        aliases = [f"e{index}" for index in range(5)]
        for alias in aliases:
            await sockets["viewer"].send(subscribe(watching(alias), alias, variables=variables))
        await sockets["editor"].send(subscribe(watching("other"), "other", variables=variables))
        for _ in range(200):
            if await subscribers(server) == before + 6:
                break
            await asyncio.sleep(0.05)
        calls = cluster.requests[LIST]

        await make.set_space_status(org.admin, space["id"], "INACTIVE")
        mine = [json.loads(await asyncio.wait_for(sockets["viewer"].recv(), HANG)) for _ in aliases]
        theirs = json.loads(await asyncio.wait_for(sockets["editor"].recv(), HANG))

    answered = [m for m in mine if m["payload"]["data"][m["id"]]["space"]["namespaces"]]
    assert len(answered) == 3, "five runs of one event by one token: the budget of one"
    for message in mine:
        if message not in answered:
            [error] = message["payload"]["errors"]
            assert error["message"].startswith(TOO_MANY)
    assert theirs["payload"]["data"]["other"]["space"]["namespaces"], "another token's own"
    assert cluster.requests[LIST] - calls == 4


@pytest.mark.parametrize(
    "document",
    [
        "subscription { spaceStatusChanged { space { cloudSpaces { vclusters { kubeconfig } } } } }",
        "subscription { cloudSpacePhaseChanged { cloudSpace { ...C } } } "
        "fragment C on CloudSpace { vclusters { ...V } } fragment V on VCluster { kubeconfig }",
    ],
    ids=["kubeconfig", "kubeconfig-in-a-fragment"],
)
async def test_a_subscription_cannot_select_a_kubeconfig(
    server: Server, org: Org, document: str
) -> None:
    conversation = await converse(server, [subscribe(document)], org.tokens["admin"])
    [error] = conversation.messages
    assert error["type"] == "error", error
    [problem] = error["payload"]
    assert problem["extensions"]["code"] == "GRAPHQL_VALIDATION_FAILED"
    assert "cannot be selected in a subscription" in problem["message"]
    assert conversation.close_code is None, "the socket stays open"
    # A query still mints one for the caller alone.
    query = "{ cloudSpaces(first: 5) { nodes { vclusters { kubeconfig kubeconfigExpiresAt } } } }"
    assert not (await org.admin.call(query))["errors"]
