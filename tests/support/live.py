"""A subscription read in the background into a queue, for tests that act (over HTTP)
while the events they cause arrive, and then take them one by one, errors included."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from gql.graphql_request import GraphQLRequest

from tests.support.graphql import GraphQL
from tests.support.server import Server

Received = asyncio.Queue[dict[str, Any] | Exception]
WAIT_S = 40.0  # a bound on a wait, not a speed requirement


@contextlib.asynccontextmanager
async def subscription(
    client: GraphQL, query: str, variables: dict[str, Any]
) -> AsyncIterator[Received]:
    """Each event's single field (or the error that ended the stream) as it arrives."""
    received: Received = asyncio.Queue()

    async def read(session: Any) -> None:
        try:
            async for result in session.subscribe(GraphQLRequest(query, variable_values=variables)):
                received.put_nowait(next(iter(result.values())))
        except Exception as error:
            received.put_nowait(error)

    async with client.websocket() as session:
        task = asyncio.create_task(read(session))
        try:
            yield received
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def next_item(received: Received) -> dict[str, Any]:
    """The next event; the stream's error is raised here."""
    item = await asyncio.wait_for(received.get(), WAIT_S)
    if isinstance(item, Exception):
        raise item
    return item


async def subscribers(server: Server) -> float:
    """Subscriptions the server streams to (the spacedock_event_subscribers gauge)."""
    return await asyncio.to_thread(server.metric, "spacedock_event_subscribers")


async def subscribers_reach(server: Server, count: float) -> None:
    """Waits (bounded) until the server streams to at least `count` subscriptions: what is
    published from then on reaches them."""
    async with asyncio.timeout(WAIT_S):
        while True:
            if await subscribers(server) >= count:
                return
            await asyncio.sleep(0.02)
