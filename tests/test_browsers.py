"""Browsers on other origins, and the WebSocket handshake as frontend libraries make it.

A page served from another origin on 127.0.0.1 calls /graphql and subscribes over
WebSocket when SPACEDOCK_CORS_ORIGINS lists its origin, in headless Chromium, and
both fail from an origin not listed. Preflights, the REST routes and the WebSocket
origin check are checked on the wire too, and so is every connection_init payload
shape frontend libraries send, with the close reason of a refusal.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from tests.conftest import Org
from tests.support import factories as make
from tests.support.chromium import Chromium, chromium_available
from tests.support.ports import HeldPort
from tests.support.server import REPO, Server

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
  ws.onclose = (event) => { window.socket.closed = event.code; };
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
        assert (await response.json())["data"] == {"viewer": {"role": "VIEWER"}}


async def test_an_origin_not_listed_gets_no_cors_headers(server: Server, org: Org) -> None:
    status, headers = await preflight(server, "/graphql", NOT_LISTED)
    assert status >= 400
    assert "access-control-allow-origin" not in headers
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            server.url,
            json={"query": "{ viewer { role } }"},
            headers={"Origin": NOT_LISTED, **org.viewer.headers},
        ) as response,
    ):
        assert "access-control-allow-origin" not in response.headers


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
        await socket.send(json.dumps(message))
        try:
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


async def test_a_websocket_from_an_origin_not_listed_is_refused(server: Server, org: Org) -> None:
    with pytest.raises(InvalidStatus) as refused:
        await websocket_init(server, org.viewer.headers, origin=NOT_LISTED)
    assert refused.value.response.status_code == 403


# -- a real browser -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chromium() -> None:
    if not chromium_available():
        subprocess.run(["make", "browser"], cwd=REPO, check=False, capture_output=True)
    if chromium_available():
        return
    reason = "Debian's chromium is not installed and `make browser` could not install it"
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


async def serve_page(port: HeldPort) -> web.AppRunner:
    """The dashboard page, served on 127.0.0.1:port: another origin than the API's."""
    app = web.Application()

    async def index(request: web.Request) -> web.Response:
        return web.Response(text=PAGE, content_type="text/html")

    app.router.add_get("/", index)
    runner = web.AppRunner(app)
    await runner.setup()
    await port.site(runner).start()
    return runner


@pytest.fixture
async def browser(chromium: None, tmp_path: Path) -> AsyncIterator[Chromium]:
    async with Chromium(tmp_path / "profile") as opened:
        yield opened


async def open_dashboard(browser: Chromium, port: HeldPort) -> web.AppRunner:
    runner = await serve_page(port)
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


async def test_a_page_on_an_origin_not_listed_can_neither_query_nor_subscribe(
    server: Server, org: Org, browser: Chromium
) -> None:
    runner = await open_dashboard(browser, HeldPort())
    try:
        token = json.dumps(org.tokens["viewer"])
        answer = await browser.evaluate(f"window.query({json.dumps(server.url)}, {token})")
        assert "failed" in answer, answer
        await browser.evaluate(f"window.listen({json.dumps(server.ws_url)}, {token})")
        code = await browser.wait_for("window.socket.closed")
        assert code == 1006, "the handshake itself was refused"
        assert not await browser.evaluate("window.socket.acked || false")
    finally:
        await runner.cleanup()
