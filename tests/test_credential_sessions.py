"""A WebSocket lives no longer than its credential: revoking its API token, or its JWT
expiring, closes it with 4403 and the reason within seconds, and no event is sent after."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import Org
from tests.support import factories as make
from tests.support.graphql import RawSocket
from tests.support.oidc_standin import OidcStandIn
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
    return {"SPACEDOCK_PROBE_FAILURE_THRESHOLD": "1000000", **oidc.server_env()}


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
