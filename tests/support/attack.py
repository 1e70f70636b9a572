"""What the attack tests share: raw HTTP and WebSocket calls that send exactly the bytes an
attacker would, and a bystander that keeps asking /healthz while an attack runs.

The bystander is a hang detector, not a stopwatch: each of its requests has a generous
timeout, so a server whose event loop is blocked by the attack fails the test, while
timing figures belong to `bench/abuse.py`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp
import websockets
from websockets.exceptions import ConnectionClosed
from websockets.typing import Subprotocol

from tests.support.server import Server

T = TypeVar("T")
PROTOCOL = Subprotocol("graphql-transport-ws")
# Far above any healthy answer, far below "frozen for minutes".
HANG = 10.0


@dataclass
class Answer:
    status: int
    content_type: str
    text: str

    @property
    def body(self) -> dict[str, Any]:
        parsed: dict[str, Any] = json.loads(self.text)
        return parsed

    @property
    def codes(self) -> list[str]:
        return [e.get("extensions", {}).get("code") for e in self.body.get("errors") or []]


async def send(
    server: Server,
    data: bytes | str | AsyncIterator[bytes] | None = None,
    *,
    token: str | None = None,
    method: str = "POST",
    content_type: str | None = "application/json",
    params: dict[str, str] | None = None,
    json_body: Any = None,
    url_query: str | None = None,
) -> Answer:
    """One raw request to /graphql; `json_body` is encoded as JSON when given, `url_query`
    is the query string as sent (a parameter may repeat)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if content_type is not None:
        headers["Content-Type"] = content_type
    if json_body is not None:
        data = json.dumps(json_body)
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=HANG * 3)) as session,
        session.request(
            method,
            server.url if url_query is None else f"{server.url}?{url_query}",
            data=data,
            headers=headers,
            params=params,
        ) as reply,
    ):
        return Answer(reply.status, reply.content_type, await reply.text())


@dataclass
class Bystander:
    """Another client's /healthz calls during an attack."""

    answered: int = 0


async def _ask_healthz(server: Server, bystander: Bystander, stop: asyncio.Event) -> None:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=HANG)) as session:
        while True:
            async with session.get(f"{server.base}/healthz") as reply:
                assert reply.status == 200
            bystander.answered += 1
            if stop.is_set():
                return
            await asyncio.sleep(0.02)


async def while_healthz_answers(server: Server, attack: Awaitable[T]) -> tuple[T, Bystander]:
    """Runs `attack` while another client asks /healthz; fails if /healthz hangs."""
    bystander, stop = Bystander(), asyncio.Event()
    asking = asyncio.create_task(_ask_healthz(server, bystander, stop))
    try:
        result = await attack
    finally:
        stop.set()
        await asking  # its last answer came after the attack ended: the loop was never stuck
    assert bystander.answered >= 1
    return result, bystander


@dataclass
class Conversation:
    """What the server sent back over one WebSocket, and how it closed (None: still open)."""

    messages: list[dict[str, Any]]
    close_code: int | None
    close_reason: str = ""


async def converse(server: Server, frames: list[str], token: str | None = None) -> Conversation:
    """Opens a graphql-transport-ws socket (initialised with `token` when given), sends
    `frames` as they are, and reads until the server closes or answers an operation."""
    async with websockets.connect(server.ws_url, subprotocols=[PROTOCOL]) as ws:
        if token is not None:
            init = {"type": "connection_init", "payload": {"Authorization": f"Bearer {token}"}}
            await ws.send(json.dumps(init))
            assert json.loads(await asyncio.wait_for(ws.recv(), HANG))["type"] == "connection_ack"
        for frame in frames:
            await ws.send(frame)
        messages: list[dict[str, Any]] = []
        try:
            while True:
                messages.append(json.loads(await asyncio.wait_for(ws.recv(), HANG)))
                if messages[-1].get("type") in ("error", "next", "complete"):
                    return Conversation(messages, None)
        except ConnectionClosed as closed:
            assert closed.rcvd is not None, "the server dropped the socket without a close frame"
            return Conversation(messages, closed.rcvd.code, closed.rcvd.reason)


def subscribe(query: str, operation_id: str = "1", **payload: Any) -> str:
    return json.dumps(
        {"id": operation_id, "type": "subscribe", "payload": {"query": query, **payload}}
    )
