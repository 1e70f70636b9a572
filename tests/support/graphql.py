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
        async with Client(transport=transport, fetch_schema_from_transport=False) as session:
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
