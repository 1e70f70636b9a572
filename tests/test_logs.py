"""Logs an operator's collector reads (issue 25): with SPACEDOCK_LOG_FORMAT=json the server
writes one JSON object per line, and every line written for a request carries the
request's id, the one the response's X-Request-Id header and the audit log show. The
cloud SDKs' request-by-request lines stay out unless SPACEDOCK_SDK_LOG_LEVEL asks.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import websockets

from sim import clouds as cloud_standins
from tests.conftest import Org, new_org, stop_checked
from tests.support import factories as make
from tests.support.attack import PROTOCOL
from tests.support.server import Backend, Server

WAIT_S = 15.0
NEW_ID = re.compile(r"[0-9a-f]{32}")
AUDIT = """
query($action: String!) {
  auditEvents(first: 5, filter: { action: $action }) { nodes { action requestId } }
}"""


@pytest.fixture(scope="module")
def server_env() -> dict[str, str]:
    return {"SPACEDOCK_LOG_FORMAT": "json"}


def lines(server: Server) -> list[dict[str, Any]]:
    """Every line of the server's log, each of which must be a JSON object."""
    found = []
    for line in server.log().splitlines():
        parsed = json.loads(line)
        assert isinstance(parsed, dict), line
        found.append(parsed)
    return found


async def logged(server: Server, wanted: dict[str, Any]) -> list[dict[str, Any]]:
    """The lines holding every key and value of `wanted`, once at least one is written
    (uvicorn writes an access line as the answer starts)."""
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while True:
        found = [
            line
            for line in await asyncio.to_thread(lines, server)
            if all(line.get(k) == v for k, v in wanted.items())
        ]
        if found:
            return found
        assert asyncio.get_running_loop().time() < deadline, f"no line with {wanted}"
        await asyncio.sleep(0.05)


async def post(
    server: Server, token: str, body: dict[str, Any], request_id: str | None = None
) -> tuple[int, str, dict[str, Any]]:
    headers = {"Authorization": f"Bearer {token}"}
    if request_id is not None:
        headers["X-Request-Id"] = request_id
    async with (
        aiohttp.ClientSession() as session,
        session.post(server.url, json=body, headers=headers) as reply,
    ):
        return reply.status, reply.headers["X-Request-Id"], await reply.json()


async def test_a_request_line_carries_the_id_the_response_and_the_audit_log_show(
    server: Server, org: Org
) -> None:
    status, echoed, _ = await post(
        server, org.tokens["viewer"], {"query": "{ viewer { role } }"}, "trace-42.a_b"
    )
    assert (status, echoed) == (200, "trace-42.a_b")
    (access,) = await logged(server, {"request_id": "trace-42.a_b"})
    assert access["logger"] == "uvicorn.access"
    assert (access["method"], access["path"], access["status"]) == ("POST", "/graphql", 200)
    assert access["level"] == "INFO" and access["time"].endswith("+00:00")

    mutation = make.CREATE_ENVIRONMENT
    space = await make.register_generic_space(org.admin)
    variables = {
        "input": {"name": make.unique("env"), "spaceId": space["id"], "namespace": "default"}
    }
    status, echoed, body = await post(
        server, org.tokens["editor"], {"query": mutation, "variables": variables}
    )
    assert status == 200 and body["data"]["createEnvironment"]["userErrors"] == []
    assert NEW_ID.fullmatch(echoed), "no id sent: the server made one"
    events = await org.admin.data(AUDIT, {"action": "createEnvironment"})
    assert {"action": "createEnvironment", "requestId": echoed} in events["auditEvents"]["nodes"]
    assert await logged(server, {"request_id": echoed, "path": "/graphql"})


@pytest.mark.parametrize(
    "hostile",
    ["has space", "x" * 65, "semi;colon", '"quoted"'],
    ids=["space", "too-long", "semicolon", "quotes"],
)
async def test_an_id_that_is_not_a_plain_token_is_replaced(
    server: Server, org: Org, hostile: str
) -> None:
    status, echoed, _ = await post(
        server, org.tokens["viewer"], {"query": "{ viewer { role } }"}, hostile
    )
    assert status == 200
    assert NEW_ID.fullmatch(echoed), echoed
    assert await logged(server, {"request_id": echoed})
    assert hostile not in server.log()


async def test_a_websocket_connection_has_one_id_for_its_handshake_and_its_lines(
    server: Server, org: Org
) -> None:
    async with websockets.connect(
        server.ws_url, subprotocols=[PROTOCOL], additional_headers={"X-Request-Id": "ws-77"}
    ) as socket:
        assert socket.response is not None
        assert socket.response.headers["X-Request-Id"] == "ws-77"
        await socket.send(json.dumps({"type": "connection_init", "payload": org.viewer.headers}))
        assert json.loads(await socket.recv())["type"] == "connection_ack"
    found = [line["message"] for line in await logged(server, {"request_id": "ws-77"})]
    assert any('"WebSocket /graphql" [accepted]' in message for message in found), found


async def azure_lines(server: Server, org: Org) -> list[dict[str, Any]]:
    """The azure.* lines written while an Azure account is created (a token is minted)."""
    before = len(lines(server))
    await make.create_cloud_account(org.admin, "AZURE")
    return [line for line in lines(server)[before:] if line["logger"].startswith("azure")]


async def test_cloud_sdk_lines_stay_out_unless_asked(
    server: Server, org: Org, tmp_path: Path, clouds: cloud_standins.Clouds
) -> None:
    assert not [line for line in await azure_lines(server, org) if line["level"] == "INFO"]

    # The SDKs asked for at INFO, spacedock and uvicorn at WARNING: each setting holds alone.
    levels = {"SPACEDOCK_SDK_LOG_LEVEL": "INFO", "SPACEDOCK_LOG_LEVEL": "WARNING"}
    asked = Server(
        backend=Backend.sqlite(tmp_path),
        log_path=tmp_path / "asked.log",
        env={**clouds.env, "SPACEDOCK_LOG_FORMAT": "json", **levels},
    ).start()
    try:
        other = await new_org(asked)
        chatty = await azure_lines(asked, other)
        written = lines(asked)
    finally:
        stop_checked(asked)
    assert [line for line in chatty if line["level"] == "INFO"], "the setting lets them in"
    # No access line, no "spacedock ready": nothing of spacedock's or uvicorn's at INFO.
    quiet = [line for line in written if not line["logger"].startswith(("azure", "msal"))]
    assert not [line for line in quiet if line["level"] == "INFO"], quiet[:3]
    assert make.credentials_for("AZURE")["clientSecret"] not in asked.log()
