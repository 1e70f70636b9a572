"""A gql client over real HTTP and graphql-transport-ws, as frontends use the API."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
from gql import Client
from gql.graphql_request import GraphQLRequest
from gql.transport.aiohttp import AIOHTTPTransport
from gql.transport.exceptions import TransportQueryError
from gql.transport.websockets import WebsocketsTransport


class GraphQL:
    """Calls the server as one caller (one token)."""

    def __init__(self, url: str, ws_url: str, token: str | None) -> None:
        self.url = url
        self.ws_url = ws_url
        self.token = token

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    async def call(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        """The whole response: {"data": ..., "errors": [...] or None}."""
        transport = AIOHTTPTransport(url=self.url, headers=self.headers, timeout=30)
        # gql's own deadline (10 s by default) would be shorter than the server's bound on a
        # live cluster call (20 s), so a mutation that asks a busy cluster timed out here.
        client = Client(transport=transport, fetch_schema_from_transport=False, execute_timeout=30)
        async with client as session:
            try:
                result = await session.execute(
                    GraphQLRequest(query, variable_values=variables), get_execution_result=True
                )
            except TransportQueryError as failed:
                return {"data": failed.data, "errors": failed.errors}
        return {"data": result.data, "errors": result.errors}

    async def data(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        """The data of a call that must not fail."""
        response = await self.call(query, variables)
        assert not response["errors"], response["errors"]
        data: dict[str, Any] = response["data"]
        return data

    async def mutate(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        """The payload of a single mutation (its only top-level field)."""
        data = await self.data(query, variables)
        (payload,) = data.values()
        result: dict[str, Any] = payload
        return result

    async def post(
        self, query: str, variables: dict[str, Any] | None = None
    ) -> tuple[int, dict[str, Any]]:
        """The HTTP status and JSON body, as is (a 401 included)."""
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                self.url, json={"query": query, "variables": variables}, headers=self.headers
            ) as response,
        ):
            body: dict[str, Any] = json.loads(await response.text())
            return response.status, body

    def websocket(self, init_payload: dict[str, Any] | None = None) -> Client:
        payload = init_payload if init_payload is not None else self.headers
        transport = WebsocketsTransport(url=self.ws_url, init_payload=payload)
        return Client(transport=transport, fetch_schema_from_transport=False)


class RawSocket:
    """graphql-transport-ws spoken by hand, to see exactly what the server sends and how
    it closes (gql hides close codes and reasons)."""

    def __init__(self, ws_url: str, token: str | None) -> None:
        self.ws_url = ws_url
        self.token = token
        self.socket: Any = None
        self.close_code: int | None = None
        self.close_reason: str | None = None

    async def __aenter__(self) -> RawSocket:
        from websockets.asyncio.client import connect

        self.socket = await connect(self.ws_url, subprotocols=["graphql-transport-ws"])  # type: ignore[list-item]
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.socket.close()

    async def send(self, message: dict[str, Any]) -> None:
        await self.socket.send(json.dumps(message))

    async def init(self) -> dict[str, Any] | None:
        """connection_init with the token; the ack, or None when the server closed instead."""
        payload = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        await self.send({"type": "connection_init", "payload": payload})
        return await self.receive()

    async def subscribe(self, operation_id: str, query: str) -> None:
        await self.send({"id": operation_id, "type": "subscribe", "payload": {"query": query}})

    async def receive(self, within_s: float = 15.0) -> dict[str, Any] | None:
        """The next message, or None once the server has closed (close_code is set)."""
        import asyncio

        from websockets.exceptions import ConnectionClosed

        try:
            message: dict[str, Any] = json.loads(
                await asyncio.wait_for(self.socket.recv(), within_s)
            )
        except ConnectionClosed as closed:
            received = closed.rcvd
            self.close_code = None if received is None else received.code
            self.close_reason = None if received is None else received.reason
            return None
        return message
