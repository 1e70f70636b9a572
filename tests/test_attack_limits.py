"""Issue 7, size and time limits: request heads, slow senders, stored secrets, and
subscriptions per token.

An unauthenticated client sending an endless header is cut off at 64 KiB with 431; a
request head or body that trickles in is dropped with 408 after the read timeout; a
secret or CA bundle over 64 KiB is INVALID on its field; one token cannot hold more
than SPACEDOCK_MAX_SUBSCRIPTIONS_PER_TOKEN subscriptions across its connections.
Another client's /healthz answers throughout.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests.conftest import Org, new_org
from tests.support import factories as make
from tests.support.attack import HANG, converse, subscribe, while_healthz_answers
from tests.support.server import Server

READ_TIMEOUT_S = 1.0
SUBSCRIPTIONS_PER_TOKEN = 5
EVENTS = "subscription { spaceStatusChanged { status } }"


@pytest.fixture(scope="module")
def server_env() -> dict[str, str]:
    return {
        "SPACEDOCK_REQUEST_READ_TIMEOUT_S": str(READ_TIMEOUT_S),
        "SPACEDOCK_MAX_SUBSCRIPTIONS_PER_TOKEN": str(SUBSCRIPTIONS_PER_TOKEN),
    }


async def status_line(reader: asyncio.StreamReader) -> bytes:
    return await asyncio.wait_for(reader.readline(), HANG)


async def endless_header(server: Server) -> tuple[int, bytes]:
    """Sends one header that never ends, 64 KiB at a time, until the server answers or
    100 MB are out; returns the bytes sent and the status line."""
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    answer = asyncio.create_task(status_line(reader))
    writer.write(b"POST /graphql HTTP/1.1\r\nHost: x\r\nX-Padding: ")
    sent, chunk = 0, b"a" * 65536
    try:
        while sent < 100 * 1024 * 1024 and not answer.done():
            writer.write(chunk)
            await writer.drain()
            sent += len(chunk)
            # drain() returns at once while the socket takes more; let the reader see an
            # answer that has come, so what we count is what the server took before it.
            await asyncio.sleep(0)
    except ConnectionError:
        pass  # the server closed after answering
    line = await answer
    writer.close()
    return sent, line


async def test_an_endless_unauthenticated_header_is_cut_off_with_431(server: Server) -> None:
    (sent, line), _ = await while_healthz_answers(server, endless_header(server))
    assert line.startswith(b"HTTP/1.1 431"), line
    # Cut off near the limit, not after 100 MB (the kernel's buffers account for the rest).
    assert sent < 16 * 1024 * 1024


async def test_many_headers_past_64_kib_are_refused_too(server: Server) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    headers = b"".join(b"X-H%d: %s\r\n" % (i, b"v" * 100) for i in range(1000))
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + headers + b"\r\n")
    assert (await status_line(reader)).startswith(b"HTTP/1.1 431")
    writer.close()


@pytest.mark.parametrize(
    "partial",
    [b"", b"GET /healthz HT", b"POST /graphql HTTP/1.1\r\nHost: x\r\nContent-Type: appl"],
    ids=["silent", "half-request-line", "half-headers"],
)
async def test_a_half_sent_request_head_is_dropped_with_408(server: Server, partial: bytes) -> None:
    async def slowloris() -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(partial)
        line = await status_line(reader)  # waits for the server's verdict, bounded by HANG
        assert await asyncio.wait_for(reader.read(), HANG) is not None
        assert reader.at_eof(), "the server must close the connection"
        writer.close()
        return line

    line, _ = await while_healthz_answers(server, slowloris())
    assert line.startswith(b"HTTP/1.1 408"), line


async def test_a_body_that_trickles_in_is_dropped_with_408(server: Server, org: Org) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(
        b"POST /graphql HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Authorization: Bearer " + org.tokens["viewer"].encode() + b"\r\n"
        b'Content-Length: 1000\r\n\r\n{"query": '
    )
    await writer.drain()
    line = await status_line(reader)
    assert line.startswith(b"HTTP/1.1 408"), line
    rest = await asyncio.wait_for(reader.read(), HANG)
    assert b'"code":"BAD_REQUEST"' in rest
    writer.close()


async def test_many_half_open_connections_do_not_stop_others(server: Server) -> None:
    async def hold_many() -> int:
        pairs = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(200)]
        for _, writer in pairs:
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        lines = await asyncio.gather(*(status_line(reader) for reader, _ in pairs))
        for _, writer in pairs:
            writer.close()
        return sum(line.startswith(b"HTTP/1.1 408") for line in lines)

    dropped, bystander = await while_healthz_answers(server, hold_many())
    assert dropped == 200
    assert bystander.answered >= 1


# -- stored secrets and CA bundles ----------------------------------------------------------


async def test_secrets_and_ca_bundles_over_64_kib_are_invalid(org: Org) -> None:
    huge_pem = make.ca_pem() * (70 * 1024 // len(make.ca_pem()) + 1)
    cases: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [
        (
            make.REGISTER_SPACE,
            {
                "name": "big-ca",
                "provider": "GENERIC",
                "config": {**make.generic_config(), "caCert": huge_pem},
            },
            ("config", "caCert"),
        ),
        (
            make.REGISTER_SPACE,
            {
                "name": "big-token",
                "provider": "GENERIC",
                "config": {**make.generic_config(), "serviceAccountToken": "t" * (65 * 1024)},
            },
            ("config", "serviceAccountToken"),
        ),
        (
            make.CREATE_CLOUD_ACCOUNT,
            {
                "name": "big-secret",
                "provider": "AWS",
                "credentials": {**make.AWS_CREDENTIALS, "secretAccessKey": "s" * (65 * 1024)},
            },
            ("credentials", "secretAccessKey"),
        ),
    ]
    for mutation, values, path in cases:
        payload = await org.admin.mutate(mutation, {"input": values})
        errors = payload["userErrors"]
        assert (("input", *path), "INVALID") in make.error_fields(payload), errors
        assert any("64 KiB" in e["message"] for e in errors)
    spaces = await org.viewer.data("{ spaces(first: 10) { totalCount } }")
    assert spaces["spaces"]["totalCount"] == 0


# -- subscriptions per token ----------------------------------------------------------------


async def open_subscriptions(server: Server, token: str, count: int) -> Any:
    import websockets

    from tests.support.attack import PROTOCOL

    ws = await websockets.connect(server.ws_url, subprotocols=[PROTOCOL])
    await ws.send(
        json.dumps({"type": "connection_init", "payload": {"Authorization": f"Bearer {token}"}})
    )
    assert json.loads(await asyncio.wait_for(ws.recv(), HANG))["type"] == "connection_ack"
    for index in range(count):
        await ws.send(subscribe(EVENTS, operation_id=str(index)))
    return ws


async def subscribers(server: Server) -> int:
    return int(await asyncio.to_thread(server.metric, "spacedock_event_subscribers"))


async def subscribers_reach(server: Server, expected: int) -> None:
    deadline = asyncio.get_running_loop().time() + HANG
    while (count := await subscribers(server)) != expected:
        assert asyncio.get_running_loop().time() < deadline, f"{count} subscribers, not {expected}"
        await asyncio.sleep(0.05)


async def test_one_token_holds_at_most_its_share_across_connections(
    server: Server, org: Org
) -> None:
    token = org.tokens["viewer"]
    first = await open_subscriptions(server, token, 3)
    second = await open_subscriptions(server, token, 2)
    await subscribers_reach(server, SUBSCRIPTIONS_PER_TOKEN)

    refused = await converse(server, [subscribe(EVENTS, operation_id="extra")], token)
    (error,) = refused.messages
    assert error["type"] == "error"
    assert error["payload"][0]["extensions"]["code"] == "BAD_USER_INPUT"
    assert str(SUBSCRIPTIONS_PER_TOKEN) in error["payload"][0]["message"]

    # Another token (even of the same org) has its own allowance.
    other = await new_org(server, "other")
    third = await open_subscriptions(server, other.tokens["viewer"], 1)
    await subscribers_reach(server, SUBSCRIPTIONS_PER_TOKEN + 1)

    # Completing one gives its place back; so does closing a connection.
    await first.send(json.dumps({"id": "0", "type": "complete"}))
    await subscribers_reach(server, SUBSCRIPTIONS_PER_TOKEN)
    again = await open_subscriptions(server, token, 1)
    await subscribers_reach(server, SUBSCRIPTIONS_PER_TOKEN + 1)
    await second.close()
    await subscribers_reach(server, SUBSCRIPTIONS_PER_TOKEN - 1)
    for ws in (first, third, again):
        await ws.close()
    await subscribers_reach(server, 0)
