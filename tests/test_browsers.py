"""Browsers on other origins, and the WebSocket handshake as frontend libraries make it.

A page served from another origin on 127.0.0.1 calls /graphql and subscribes over
WebSocket when SPACEDOCK_CORS_ORIGINS lists its origin, in headless Chromium, and
both fail from an origin not listed, with a reason its developer reads: the refused
preflight's header in the network panel, the WebSocket's close reason in the page.
Preflights, the REST routes and the WebSocket origin check are checked on the wire too,
and so is every connection_init payload shape frontend libraries send, with the close
reason of a refusal.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from sim.ports import HeldPort
from tests.conftest import Org
from tests.support import factories as make
from tests.support.chromium import Chromium, serve_page
from tests.support.server import Server

ALLOWED_PORT = HeldPort()
ALLOWED = f"http://127.0.0.1:{ALLOWED_PORT.number}"
NOT_LISTED = "http://127.0.0.1:9"  # an origin no setting names

PAGE = """<!doctype html>
<html><head><title>dashboard</title></head><body><script>
window.query = async (url, token) => {
  try {
    const response = await fetch(url, {
      method: "POST",
      headers: {"Content-Type": "application/json", "Authorization": "Bearer " + token},
      body: JSON.stringify({query: "{ viewer { role } }"}),
    });
    return {status: response.status, body: await response.json()};
  } catch (error) {
    return {failed: String(error)};
  }
};
window.socket = {};
window.listen = (url, token) => {
  const ws = new WebSocket(url, "graphql-transport-ws");
  ws.onopen = () => ws.send(JSON.stringify(
    {type: "connection_init", payload: {Authorization: "Bearer " + token}}));
  ws.onmessage = (message) => {
    const data = JSON.parse(message.data);
    if (data.type === "connection_ack") {
      window.socket.acked = true;
      ws.send(JSON.stringify({id: "1", type: "subscribe",
        payload: {query: "subscription { spaceStatusChanged { spaceId status } }"}}));
    }
    if (data.type === "next") window.socket.event = data.payload.data.spaceStatusChanged;
  };
  ws.onclose = (event) => { window.socket.closed = event.code; window.socket.reason = event.reason; };
};
</script></body></html>
"""


@pytest.fixture(scope="module")
def server_env() -> dict[str, str]:
    # Probes of the test clusters must not publish events of their own.
    return {
        "SPACEDOCK_CORS_ORIGINS": f"http://localhost:5173, {ALLOWED}",
        "SPACEDOCK_PROBE_FAILURE_THRESHOLD": "1000000",
    }


async def preflight(server: Server, path: str, origin: str) -> tuple[int, dict[str, str]]:
    async with (
        aiohttp.ClientSession() as session,
        session.options(
            server.base + path,
            headers={
                "Origin": origin,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization,content-type",
            },
        ) as response,
    ):
        return response.status, {k.lower(): v for k, v in response.headers.items()}


# Fixed ids: the port is picked per process, and pytest-xdist workers must collect alike.
@pytest.mark.parametrize(
    "origin", ["http://localhost:5173", ALLOWED], ids=["localhost", "loopback"]
)
async def test_a_listed_origin_passes_the_preflight_and_reads(
    server: Server, org: Org, origin: str
) -> None:
    status, headers = await preflight(server, "/graphql", origin)
    assert status == 200
    assert headers["access-control-allow-origin"] == origin
    assert "authorization" in headers["access-control-allow-headers"].lower()
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            server.url,
            json={"query": "{ viewer { role } }"},
            headers={"Origin": origin, **org.viewer.headers},
        ) as response,
    ):
        assert response.headers["access-control-allow-origin"] == origin
        # The page may read the request id an error report should quote.
        exposed = response.headers["access-control-expose-headers"].lower().split(", ")
        assert "x-request-id" in exposed
        assert response.headers["x-request-id"]
        assert (await response.json())["data"] == {"viewer": {"role": "VIEWER"}}


async def test_an_origin_not_listed_gets_no_cors_headers_but_a_reason(
    server: Server, org: Org
) -> None:
    status, headers = await preflight(server, "/graphql", NOT_LISTED)
    assert status == 403
    assert "access-control-allow-origin" not in headers
    reason = f"Origin {NOT_LISTED} is not in SPACEDOCK_CORS_ORIGINS; list it there"
    assert headers["x-spacedock-refused"].startswith(reason)
    async with (
        aiohttp.ClientSession() as session,
        session.options(
            server.url,
            headers={"Origin": NOT_LISTED, "Access-Control-Request-Method": "POST"},
        ) as refused,
    ):
        [error] = (await refused.json())["errors"]
        assert error["extensions"]["code"] == "FORBIDDEN"
        assert error["message"] == headers["x-spacedock-refused"]
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            server.url,
            json={"query": "{ viewer { role } }"},
            headers={"Origin": NOT_LISTED, **org.viewer.headers},
        ) as response,
    ):
        assert "access-control-allow-origin" not in response.headers
        assert response.headers["x-spacedock-refused"].startswith(reason)


async def test_the_servers_own_pages_and_clients_without_an_origin_are_not_cross_origin(
    server: Server, org: Org
) -> None:
    """GraphiQL (served here) sends its own origin; a script sends none: neither is refused."""
    own = server.base
    for headers in ({"Origin": own}, {}):
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                server.url,
                json={"query": "{ viewer { role } }"},
                headers={**headers, **org.viewer.headers},
            ) as response,
        ):
            assert "x-spacedock-refused" not in response.headers
            assert (await response.json())["data"] == {"viewer": {"role": "VIEWER"}}
    answer = await websocket_init(server, org.viewer.headers, origin=own)
    assert isinstance(answer, dict) and answer["type"] == "connection_ack"


async def test_the_rest_routes_answer_browsers_too(server: Server) -> None:
    path = "/api/v1/cloudspaces/cs_unknown/vclusters/main/kubeconfig"
    status, headers = await preflight(server, path, ALLOWED)
    assert status == 200
    assert headers["access-control-allow-origin"] == ALLOWED
    async with (
        aiohttp.ClientSession() as session,
        session.get(server.base + path, headers={"Origin": ALLOWED}) as response,
    ):
        assert response.status == 401, "the preflight allows the call, the token still counts"
        assert response.headers["access-control-allow-origin"] == ALLOWED


async def websocket_init(
    server: Server, payload: dict[str, Any] | None, origin: str | None = None
) -> dict[str, Any] | tuple[int, str]:
    """The server's answer to connection_init: the ack message, or (close code, reason)."""
    async with connect(
        server.ws_url,
        subprotocols=["graphql-transport-ws"],  # type: ignore[list-item]
        origin=origin,  # type: ignore[arg-type]
    ) as socket:
        message: dict[str, Any] = {"type": "connection_init"}
        if payload is not None:
            message["payload"] = payload
        try:  # a refused origin is closed at once: maybe before the init is sent
            await socket.send(json.dumps(message))
            answer: dict[str, Any] = json.loads(await asyncio.wait_for(socket.recv(), 10))
        except ConnectionClosed as closed:
            assert closed.rcvd is not None
            return closed.rcvd.code, closed.rcvd.reason
        return answer


@pytest.mark.parametrize(
    "shape",
    [
        lambda token: {"Authorization": f"Bearer {token}"},
        lambda token: {"authorization": f"Bearer {token}"},
        lambda token: {"headers": {"Authorization": f"Bearer {token}"}},
        lambda token: {"headers": {"authorization": f"Bearer {token}"}},
    ],
    ids=["Authorization", "authorization", "headers.Authorization", "headers.authorization"],
)
async def test_every_connection_init_shape_frontends_send_is_accepted(
    server: Server, org: Org, shape: Any
) -> None:
    answer = await websocket_init(server, shape(org.tokens["viewer"]))
    assert isinstance(answer, dict) and answer["type"] == "connection_ack"


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (None, 'Send {"Authorization": "Bearer <token>"} in the connection_init payload.'),
        ({}, 'Send {"Authorization": "Bearer <token>"} in the connection_init payload.'),
        (
            {"token": "x"},
            'Send {"Authorization": "Bearer <token>"} in the connection_init payload.',
        ),
        (
            {"headers": "Bearer x"},
            'Send {"Authorization": "Bearer <token>"} in the connection_init payload.',
        ),
        ({"Authorization": "Bearer sdk_not-a-token"}, "Unknown API token."),
        ({"headers": {"Authorization": "Bearer sdk_nope"}}, "Unknown API token."),
        (
            {"Authorization": "Basic dXNlcjpwYXNz"},
            "The Authorization header must be `Bearer <token>`.",
        ),
    ],
)
async def test_a_refused_connection_init_says_what_to_send(
    server: Server, payload: dict[str, Any] | None, reason: str
) -> None:
    assert await websocket_init(server, payload) == (4403, reason)


async def test_a_websocket_from_a_listed_origin_is_accepted(server: Server, org: Org) -> None:
    answer = await websocket_init(server, org.viewer.headers, origin=ALLOWED)
    assert isinstance(answer, dict) and answer["type"] == "connection_ack"


async def test_a_websocket_from_an_origin_not_listed_is_closed_with_the_reason(
    server: Server, org: Org
) -> None:
    answer = await websocket_init(server, org.viewer.headers, origin=NOT_LISTED)
    assert answer == (4403, f"Origin {NOT_LISTED} is not in SPACEDOCK_CORS_ORIGINS")
    long_origin = "http://" + "x" * 300 + ".example"
    code, reason = await websocket_init(server, org.viewer.headers, origin=long_origin)
    assert code == 4403 and len(reason.encode()) <= 123 and "SPACEDOCK_CORS_ORIGINS" in reason


# -- a real browser -------------------------------------------------------------------------


@pytest.fixture
async def browser(chromium: None, tmp_path: Path) -> AsyncIterator[Chromium]:
    async with Chromium(tmp_path / "profile") as opened:
        yield opened


async def open_dashboard(browser: Chromium, port: HeldPort) -> web.AppRunner:
    runner = await serve_page(port, PAGE)
    await browser.open(f"http://127.0.0.1:{port.number}/")
    await browser.wait_for("typeof window.listen === 'function'")
    return runner


async def test_a_page_on_a_listed_origin_queries_and_subscribes(
    server: Server, org: Org, browser: Chromium
) -> None:
    runner = await open_dashboard(browser, ALLOWED_PORT)
    try:
        token = json.dumps(org.tokens["viewer"])
        answer = await browser.evaluate(f"window.query({json.dumps(server.url)}, {token})")
        assert answer == {"status": 200, "body": {"data": {"viewer": {"role": "VIEWER"}}}}
        # A refused credential: the page reads the 401 and its reason in GraphQL's shape.
        refused = await browser.evaluate(f"window.query({json.dumps(server.url)}, 'sdk_gone')")
        assert refused == {
            "status": 401,
            "body": {
                "errors": [
                    {"message": "Unknown API token.", "extensions": {"code": "UNAUTHENTICATED"}}
                ]
            },
        }

        await browser.evaluate(f"window.listen({json.dumps(server.ws_url)}, {token})")
        await browser.wait_for("window.socket.acked || window.socket.closed")
        assert await browser.evaluate("window.socket.acked") is True
        # The subscription starts just after the ack: register until an event arrives.
        registered = set()
        for _ in range(20):
            registered.add((await make.register_generic_space(org.editor))["id"])
            try:
                event = await browser.wait_for("window.socket.event", seconds=1.0)
                break
            except AssertionError:
                continue
        else:
            pytest.fail("the page's subscription delivered nothing")
        assert event["spaceId"] in registered
        assert event["status"] == "UNKNOWN"
    finally:
        await runner.cleanup()


async def test_a_page_on_an_origin_not_listed_can_neither_query_nor_subscribe_and_is_told_why(
    server: Server, org: Org, browser: Chromium
) -> None:
    """What the browser's developer reads: the refused preflight's status and reason in
    the network panel (the page itself is told nothing, as CORS wants), and the
    WebSocket's close code and reason, which the page's CloseEvent holds."""
    port = HeldPort()
    origin = f"http://127.0.0.1:{port.number}"
    runner = await open_dashboard(browser, port)
    try:
        token = json.dumps(org.tokens["viewer"])
        answer = await browser.evaluate(f"window.query({json.dumps(server.url)}, {token})")
        assert "failed" in answer, answer
        [preflight] = [r for r in browser.responses if r["type"] == "Preflight"]
        assert preflight["status"] == 403
        assert "access-control-allow-origin" not in preflight["headers"]
        reason = preflight["headers"]["x-spacedock-refused"]
        assert f"Origin {origin} is not in SPACEDOCK_CORS_ORIGINS" in reason
        assert "http://localhost:5173 and http://127.0.0.1:5173 are two" in reason
        [failed] = [f for f in browser.failures if f["type"] == "Fetch"]
        assert failed["cors"] == "PreflightMissingAllowOriginHeader"

        await browser.evaluate(f"window.listen({json.dumps(server.ws_url)}, {token})")
        code = await browser.wait_for("window.socket.closed")
        assert code == 4403
        assert await browser.evaluate("window.socket.reason") == (
            f"Origin {origin} is not in SPACEDOCK_CORS_ORIGINS"
        )
        assert not await browser.evaluate("window.socket.acked || false")
        assert not [frame for frame in browser.frames_sent if "subscribe" in frame]
    finally:
        await runner.cleanup()
