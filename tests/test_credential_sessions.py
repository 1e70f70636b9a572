"""A WebSocket lives no longer than its credential: revoking its API token, or its JWT
expiring, closes it with 4403 and the reason within seconds, and no event is sent after.
What a credential may hold open is counted by the credential, not by how it is spelled.

Issue 18: a revocation or a policy taken away reaches open sockets before the mutation
returns, on this server and on another replica (Postgres). The tests hold an event at
the last step before delivery (the subscription selects a live field, and the cluster
stand-in holds its answer), run the mutation to completion, then let the event go: it
never arrives. The subscription ends with FORBIDDEN instead, or the socket with 4403.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import websockets

from sim.kube_standin import KubeStandIn
from sim.oidc_standin import OidcStandIn
from tests.conftest import Org
from tests.support import factories as make
from tests.support.attack import HANG, PROTOCOL, subscribe
from tests.support.graphql import RawSocket
from tests.support.server import Server

EVENTS = "subscription { spaceStatusChanged { spaceId status } }"
CREATE_TOKEN = """
mutation($input: CreateApiTokenInput!) {
  createApiToken(input: $input) { token apiToken { id } userErrors { field message code } }
}"""
REVOKE = """
mutation($id: ID!) { revokeApiToken(input: {id: $id}) { apiToken { revokedAt } userErrors { code } } }"""


@pytest.fixture(scope="module")
def oidc() -> Iterator[OidcStandIn]:
    with OidcStandIn() as standin:
        yield standin


@pytest.fixture(scope="module")
def server_env(oidc: OidcStandIn) -> dict[str, str]:
    return {
        "SPACEDOCK_PROBE_FAILURE_THRESHOLD": "1000000",
        "SPACEDOCK_MAX_SUBSCRIPTIONS_PER_TOKEN": str(SUBSCRIPTIONS_PER_CREDENTIAL),
        # An answer held at the cluster waits for the test, not for this timeout.
        "SPACEDOCK_LIVE_FIELD_TIMEOUT_S": "60",
        **oidc.server_env(),
    }


SUBSCRIPTIONS_PER_CREDENTIAL = 4


async def subscribed(server: Server, socket: RawSocket, before: float) -> None:
    """Subscribes and waits (bounded) until the server holds the subscription."""
    await socket.subscribe("events", EVENTS)
    for _ in range(200):
        if await asyncio.to_thread(server.metric, "spacedock_event_subscribers") > before:
            return
        await asyncio.sleep(0.05)
    pytest.fail("the subscription never started")


async def an_event(org: Org, space_id: str, status: str) -> None:
    make.succeeded(
        await org.admin.mutate(make.SET_SPACE_STATUS, {"input": {"id": space_id, "status": status}})
    )


async def until_closed(socket: RawSocket) -> list[dict[str, Any]]:
    """Every message until the server closes (bounded: each must come within 15 s)."""
    received = []
    while (message := await socket.receive(within_s=15)) is not None:
        received.append(message)
    return received


async def test_revoking_a_token_closes_its_websocket(server: Server, org: Org) -> None:
    space = await make.register_generic_space(org.admin)
    made = make.succeeded(
        await org.admin.mutate(CREATE_TOKEN, {"input": {"name": "dashboard", "role": "VIEWER"}})
    )
    before = await asyncio.to_thread(server.metric, "spacedock_event_subscribers")
    async with RawSocket(server.ws_url, made["token"]) as socket:
        assert (await socket.init() or {}).get("type") == "connection_ack"
        await subscribed(server, socket, before)
        await an_event(org, space["id"], "INACTIVE")
        first = await socket.receive()
        assert first is not None and first["type"] == "next", "events flow before revocation"

        make.succeeded(await org.admin.mutate(REVOKE, {"id": made["apiToken"]["id"]}))
        await until_closed(socket)
        assert (socket.close_code, socket.close_reason) == (4403, "API token revoked")


async def test_an_expiring_jwt_closes_its_websocket_and_nothing_is_sent_after(
    server: Server, oidc: OidcStandIn, org: Org
) -> None:
    space = await make.register_generic_space(org.admin)
    token = oidc.token(org=org.name, lifetime_s=8)
    expires_at = time.time() + 8
    before = await asyncio.to_thread(server.metric, "spacedock_event_subscribers")
    async with RawSocket(server.ws_url, token) as socket:
        assert (await socket.init() or {}).get("type") == "connection_ack"
        await subscribed(server, socket, before)
        await an_event(org, space["id"], "INACTIVE")
        first = await socket.receive()
        assert first is not None and first["type"] == "next"

        await asyncio.sleep(max(0.0, expires_at + 0.2 - time.time()))  # until exp has passed
        await an_event(org, space["id"], "ACTIVE")
        after_expiry = await until_closed(socket)
        assert [m for m in after_expiry if m.get("type") == "next"] == [], "no event after exp"
        assert (socket.close_code, socket.close_reason) == (4403, "JWT expired")


# -- the subscription cap counts the credential (issue 18) ---------------------------

# One credential, as clients may spell its header: each was a new allowance before.
SPELLINGS = ("Bearer {}", "bearer {}", "BEARER {}", "Bearer  {}", " Bearer {}\t", "bEaReR   {}")


async def subscribers(server: Server) -> int:
    return int(await asyncio.to_thread(server.metric, "spacedock_event_subscribers"))


async def test_the_subscription_cap_counts_the_credential_not_its_spelling(
    server: Server, oidc: OidcStandIn, org: Org
) -> None:
    subject = make.unique("sub")
    jwts = [oidc.token(org=org.name, sub=subject, lifetime_s=300 + n) for n in range(2)]
    for credentials in ([org.tokens["viewer"]], jwts):  # one API token; two JWTs of one subject
        async with contextlib.AsyncExitStack() as sockets:
            before = await subscribers(server)
            for index, spelling in enumerate(SPELLINGS):
                ws = await sockets.enter_async_context(
                    websockets.connect(server.ws_url, subprotocols=[PROTOCOL])
                )
                given = spelling.format(credentials[index % len(credentials)])
                shown = spelling.format("<credential>")  # failures never print the secret
                init = {"type": "connection_init", "payload": {"Authorization": given}}
                await ws.send(json.dumps(init))
                assert json.loads(await asyncio.wait_for(ws.recv(), HANG))["type"] == (
                    "connection_ack"
                ), shown
                await ws.send(subscribe(EVENTS, operation_id="events"))
                if index < SUBSCRIPTIONS_PER_CREDENTIAL:
                    for _ in range(200):
                        if await subscribers(server) == before + index + 1:
                            break
                        await asyncio.sleep(0.05)
                    else:
                        pytest.fail(f"subscription {index} ({shown!r}) never started")
                    continue
                try:
                    refused = json.loads(await asyncio.wait_for(ws.recv(), HANG))
                except TimeoutError:
                    held = await subscribers(server) - before
                    pytest.fail(f"{shown!r} was not refused; the credential holds {held}")
                assert refused["type"] == "error", (shown, refused)
                assert refused["payload"][0]["extensions"]["code"] == "BAD_USER_INPUT"
            assert await subscribers(server) == before + SUBSCRIPTIONS_PER_CREDENTIAL


# -- changes reach open sockets before the mutation returns (issue 18) -----------------

GATED = """
subscription($id: ID!) { spaceStatusChanged(spaceId: $id) { spaceId status space { namespaces { name } } } }"""
LIST = "GET /api/v1/namespaces"
CREATE_ROLE = """
mutation($input: CreateRoleInput!) { createRole(input: $input) { role { id } userErrors { code } } }"""
UPDATE_ROLE = """
mutation($input: UpdateRoleInput!) { updateRole(input: $input) { role { id } userErrors { code } } }"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[KubeStandIn]:
    with KubeStandIn() as standin:
        yield standin


async def metric_reaches(server: Server, name: str, expected: float) -> None:
    for _ in range(300):
        if await asyncio.to_thread(server.metric, name) >= expected:
            return
        await asyncio.sleep(0.05)
    pytest.fail(f"{name} never reached {expected}")


@contextlib.asynccontextmanager
async def gated(at: Server, token: str, space_id: str) -> AsyncIterator[RawSocket]:
    """A socket of `token` on `at`, subscribed to the space's events with its namespaces."""
    before = await asyncio.to_thread(at.metric, "spacedock_event_subscribers")
    async with RawSocket(at.ws_url, token) as socket:
        assert (await socket.init() or {}).get("type") == "connection_ack"
        payload = {"query": GATED, "variables": {"id": space_id}}
        await socket.send({"id": "gated", "type": "subscribe", "payload": payload})
        await metric_reaches(at, "spacedock_event_subscribers", before + 1)
        yield socket


async def probed_space(org: Org, cluster: KubeStandIn) -> str:
    """A space on the stand-in whose first probe has answered (no event of its own later)."""
    space = await make.register_on_standin(org.admin, cluster)
    for _ in range(200):
        found = await org.admin.data(
            "query($id: ID!) { space(id: $id) { lastProbe { ok } } }", {"id": space["id"]}
        )
        if found["space"]["lastProbe"] is not None:
            return str(space["id"])
        await asyncio.sleep(0.05)
    pytest.fail("the space was never probed")


async def role_token(org: Org, *policies: str) -> tuple[str, str, str]:
    """(role id, token id, token) of a new custom role."""
    role = make.succeeded(
        await org.admin.mutate(
            CREATE_ROLE, {"input": {"name": make.unique("watchers"), "policies": list(policies)}}
        )
    )["role"]["id"]
    made = make.succeeded(
        await org.admin.mutate(CREATE_TOKEN, {"input": {"name": "watcher", "role": role}})
    )
    return role, made["apiToken"]["id"], made["token"]


async def held_then_released(
    cluster: KubeStandIn, org: Org, space_id: str, take_away: Any, control: RawSocket
) -> None:
    """Publishes an event, holds its delivery at the cluster until `take_away()` (the
    mutation) has returned, then lets it go; `control` (allowed to see it) gets it."""
    cluster.hold()
    try:
        await an_event(org, space_id, "INACTIVE")
        for _ in range(300):  # every run of the event waits at the cluster now
            if cluster.calls_in_flight[LIST] >= 2:
                break
            await asyncio.sleep(0.02)
        else:
            pytest.fail("the event never reached the cluster")
        await take_away()
    finally:
        cluster.release()
    seen = await control.receive()
    assert seen is not None and seen["type"] == "next", "those still allowed get the event"


async def nothing_after(socket: RawSocket) -> list[dict[str, Any]]:
    """What the socket receives within a second after the event was let go."""
    received = []
    with contextlib.suppress(TimeoutError):
        while (message := await socket.receive(within_s=1.0)) is not None:
            received.append(message)
    return received


@pytest.mark.parametrize("where", ["here", "replica"])
async def test_a_policy_taken_away_ends_the_subscription_before_the_change_returns(
    request: pytest.FixtureRequest, server: Server, org: Org, cluster: KubeStandIn, where: str
) -> None:
    at = server if where == "here" else request.getfixturevalue("replica")
    space_id = await probed_space(org, cluster)
    role, _, token = await role_token(org, "space:view", "namespace:view")
    async with (
        gated(at, token, space_id) as watcher,
        gated(at, org.tokens["admin"], space_id) as admin,
    ):

        async def take_space_view() -> None:
            make.succeeded(
                await org.admin.mutate(
                    UPDATE_ROLE, {"input": {"id": role, "policies": ["namespace:view"]}}
                )
            )

        await held_then_released(cluster, org, space_id, take_space_view, admin)
        received = await nothing_after(watcher)
        assert [m["type"] for m in received] == ["error"], received
        [error] = received[0]["payload"]
        assert error["extensions"]["code"] == "FORBIDDEN"
        assert "space:view" in error["message"]
        # The socket stays open and holds the new policies: subscribing again is refused.
        await watcher.send(
            {
                "id": "again",
                "type": "subscribe",
                "payload": {"query": GATED, "variables": {"id": space_id}},
            }
        )
        again = await watcher.receive()
        assert again is not None and again["id"] == "again"
        refused = again["payload"]["errors"] if again["type"] == "next" else again["payload"]
        assert [e["extensions"]["code"] for e in refused] == ["FORBIDDEN"]


@pytest.mark.parametrize("where", ["here", "replica"])
async def test_a_revoked_token_gets_no_event_after_the_revocation_returns(
    request: pytest.FixtureRequest, server: Server, org: Org, cluster: KubeStandIn, where: str
) -> None:
    at = server if where == "here" else request.getfixturevalue("replica")
    space_id = await probed_space(org, cluster)
    _, token_id, token = await role_token(org, "space:view", "namespace:view")
    async with (
        gated(at, token, space_id) as watcher,
        gated(at, org.tokens["admin"], space_id) as admin,
    ):

        async def revoke() -> None:
            make.succeeded(await org.admin.mutate(REVOKE, {"id": token_id}))

        await held_then_released(cluster, org, space_id, revoke, admin)
        received = await until_closed(watcher)
        assert [m for m in received if m.get("type") == "next"] == [], "no event after revoke"
        assert (watcher.close_code, watcher.close_reason) == (4403, "API token revoked")
