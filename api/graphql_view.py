"""GraphQL over HTTP and graphql-transport-ws, with bearer-token auth on both.

HTTP requests are authenticated before strawberry sees them (401 with a
GraphQL-shaped body); the GraphiQL page itself, a browser GET, needs no
token. WebSocket clients send the token in `connection_init`; a bad one
closes the socket with 4403.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket
from strawberry.asgi import GraphQL
from strawberry.exceptions import ConnectionRejectionError
from strawberry.subscriptions import GRAPHQL_TRANSPORT_WS_PROTOCOL

from api import graphiql
from core.services import Services
from core.tokens import authenticate
from resolvers.context import Context
from schema.build import schema

MAX_SUBSCRIPTIONS_PER_CONNECTION = 100


def unauthenticated(message: str) -> JSONResponse:
    return JSONResponse(
        {"errors": [{"message": message, "extensions": {"code": "UNAUTHENTICATED"}}]},
        status_code=401,
        headers={"WWW-Authenticate": 'Bearer realm="spacedock"'},
    )


def authorization_of(params: dict[str, Any]) -> str | None:
    """The Authorization entry of a connection_init payload, its key in any case."""
    for key, value in params.items():
        if key.lower() == "authorization" and isinstance(value, str):
            return value
    return None


class GraphQLView(GraphQL[Context, None]):
    def __init__(self, services: Services) -> None:
        super().__init__(
            schema,
            subscription_protocols=[GRAPHQL_TRANSPORT_WS_PROTOCOL],
            max_subscriptions_per_connection=MAX_SUBSCRIPTIONS_PER_CONNECTION,
        )
        self.services = services

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            request = Request(scope)
            if not self.should_render_graphql_ide(self.request_adapter_class(request)):
                async with self.services.unit(read_only=True) as unit:
                    viewer = await authenticate(unit, request.headers.get("authorization"))
                if viewer is None:
                    message = (
                        "Invalid or revoked API token."
                        if request.headers.get("authorization")
                        else "Send Authorization: Bearer <token>; create one with `spacedock token create`."
                    )
                    await unauthenticated(message)(scope, receive, send)
                    return
                scope.setdefault("state", {})["viewer"] = viewer
        await super().__call__(scope, receive, send)

    async def get_context(
        self, request: Request | WebSocket, response: Response | WebSocket | None = None
    ) -> Context:
        return Context(
            services=self.services,
            viewer=request.scope.get("state", {}).get("viewer"),
            over_websocket=isinstance(request, WebSocket),
        )

    async def on_ws_connect(self, context: Context) -> None:
        async with self.services.unit(read_only=True) as unit:
            viewer = await authenticate(unit, authorization_of(context.connection_params))
        if viewer is None:
            raise ConnectionRejectionError()
        context.viewer = viewer

    async def render_graphql_ide(self, request: Request) -> Response:
        return graphiql.page()
