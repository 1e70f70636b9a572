"""GraphQL over HTTP and graphql-transport-ws, with bearer-token auth on both.

HTTP requests are authenticated before strawberry sees them (401 with a
GraphQL-shaped body); the GraphiQL page itself, a browser GET, needs no
token. WebSocket clients send the token in `connection_init`; a bad one
closes the socket with 4403, and so does a credential revoked or expired while the
socket is open (with the reason; nothing is sent after).

Whatever a client sends, the answer is GraphQL-shaped: a request that is not a
GraphQL request (a body that is not a JSON object, not JSON, too large, too slow,
nested too deeply, a batch, a wrong content type, no operation to pick) is a JSON
error with `extensions.code` BAD_REQUEST and a 4xx status; while the database is
unreachable, SERVICE_UNAVAILABLE with 503. A WebSocket message that is not a
protocol message closes the socket with 4400.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import Any

from cross_web import AsyncHTTPRequestAdapter, HTTPException
from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket
from strawberry.asgi import GraphQL
from strawberry.http import GraphQLHTTPResponse, GraphQLRequestData
from strawberry.http.parse_content_type import parse_content_type
from strawberry.subscriptions import GRAPHQL_TRANSPORT_WS_PROTOCOL

from api import graphiql
from api.cors import refusal
from api.http_requests import (
    BAD_REQUEST,
    TransportLimits,
    decoded_json,
    encoded_json,
    error_response,
    only_unavailable,
    read_body,
    replaying,
    request_data,
    too_large,
    unauthenticated,
)
from api.shared_subscriptions import SharedSubscriptions
from api.ws_admission import (
    MAX_SUBSCRIPTIONS_PER_CONNECTION,
    SEND_A_TOKEN,
    WS_FORBIDDEN,
    Refused,
    SubscriptionCounts,
    authorization_of,
)
from api.ws_transport import TransportWS
from core.access.auth import Unauthenticated, authenticate
from core.access.sessions import Sessions
from core.common import metrics, request_scope
from core.common.services import Services
from resolvers.common.context import Context
from schema.build import schema


class GraphQLView(GraphQL[Context, None]):
    graphql_transport_ws_handler_class = TransportWS

    def __init__(
        self,
        services: Services,
        limits: TransportLimits | None = None,
        sessions: Sessions | None = None,
        allowed_origins: tuple[str, ...] = (),
    ) -> None:
        super().__init__(
            schema,
            subscription_protocols=[GRAPHQL_TRANSPORT_WS_PROTOCOL],
            max_subscriptions_per_connection=MAX_SUBSCRIPTIONS_PER_CONNECTION,
            # A browser WebSocket from another origin is refused (closed 4403 with the
            # reason, `reject_websocket`) unless listed in SPACEDOCK_CORS_ORIGINS; clients
            # that send no Origin pass.
            allowed_origins=allowed_origins,
        )
        self.services = services
        self.limits = limits or TransportLimits()
        self.subscriptions = SubscriptionCounts(self.limits.max_subscriptions_per_token)
        self.sessions = sessions or Sessions(services, services.token_cache.ttl_s)
        # A credential change rechecks this process's sockets before it returns.
        services.token_cache.holders.append(self.sessions)
        self.shared = SharedSubscriptions()
        # Events this process missed and cannot replay: its subscribers catch up themselves.
        services.bus.when_unreplayable(self.shared.close_all)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)
            return
        # An outage or a bug is answered by api.app.Failures, as on every route.
        started = time.perf_counter()
        try:
            try:
                response = await self.answer(scope, receive)
            except HTTPException as refused:
                headers = {"Connection": "close"} if refused.status_code in (408, 413) else None
                response = error_response(refused.status_code, BAD_REQUEST, refused.reason, headers)
            await response(scope, receive, send)
        finally:
            # Labelled with the operation GraphQL executed (schema.engine.operation_metrics).
            operation, operation_type = request_scope.operation_labels()
            seconds = time.perf_counter() - started
            metrics.observe_request(seconds, operation, operation_type, "http")

    async def answer(self, scope: Scope, receive: Receive) -> Response:
        request = Request(scope, receive)
        if self.should_render_graphql_ide(self.request_adapter_class(request)):
            return await self.run(request)
        if request.method == "POST":
            declared = request.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > self.limits.max_body_bytes:
                raise HTTPException(413, too_large(self.limits))
        try:
            viewer = await authenticate(self.services, request.headers.get("authorization"))
        except Unauthenticated as refused:
            return unauthenticated(refused.message, "authorization" in request.headers)
        scope.setdefault("state", {})["viewer"] = viewer
        if request.method == "POST":
            body = await read_body(request, self.limits)
            request = Request(scope, replaying(body, receive))
        return await self.run(request)

    def create_response(
        self,
        response_data: GraphQLHTTPResponse | list[GraphQLHTTPResponse],
        sub_response: Response,
    ) -> Response:
        """A request that got nothing because the database is unreachable is a 503, as
        when its token check needed the database: one status for clients to retry on."""
        response = super().create_response(response_data, sub_response)
        if isinstance(response_data, dict) and only_unavailable(response_data):
            response.status_code = 503
        return response

    def decode_json(self, data: str | bytes) -> object:
        return decoded_json(data)

    def parse_json(self, data: str | bytes) -> Any:
        try:
            return decoded_json(data)
        except json.JSONDecodeError as error:
            raise HTTPException(
                400, f"The request body is no GraphQL request in JSON: {error.msg}."
            ) from None

    def encode_json(self, data: object) -> str:
        return encoded_json(data)

    async def parse_http_body(
        self, request: AsyncHTTPRequestAdapter
    ) -> GraphQLRequestData | list[GraphQLRequestData]:
        transport = self._get_stream_transport_from_headers(request.headers)
        protocol = transport.protocol if transport else "http"
        if request.method == "GET":
            params = request.query_params
            pairs = params.multi_items() if isinstance(params, QueryParams) else params.items()
            given = Counter(key for key, _ in pairs)
            twice = sorted(key for key, times in given.items() if times > 1)
            if twice:  # which one would count is no client's guess to make
                raise HTTPException(400, f"The parameter `{twice[0]}` is given more than once.")
            return request_data(self.parse_query_params(request.query_params), protocol)
        content_type, params = parse_content_type(request.content_type or "")
        if content_type != "application/json":
            raise HTTPException(415, "Send the request as Content-Type: application/json.")
        if params.get("charset", "utf-8").lower() != "utf-8":
            raise HTTPException(415, "Send the request body as UTF-8 (charset=utf-8).")
        return request_data(self.parse_json(await request.get_body()), protocol)

    async def get_context(
        self, request: Request | WebSocket, response: Response | WebSocket | None = None
    ) -> Context:
        return Context(
            services=self.services,
            viewer=request.scope.get("state", {}).get("viewer"),
            over_websocket=isinstance(request, WebSocket),
            # The scope api.logs.RequestIds began; a new id for a view served without it.
            request_id=request_scope.current_id() or request_scope.request_id_of(None),
        )

    async def on_ws_connect(self, context: Context) -> None:
        given = authorization_of(context.connection_params)
        if given is None:
            raise Refused(SEND_A_TOKEN)
        try:
            viewer = await authenticate(self.services, given)
        except Unauthenticated as refused:
            # A WebSocket close reason holds at most 123 bytes.
            raise Refused(refused.message.encode()[:123].decode(errors="ignore")) from None
        context.viewer = viewer

    async def reject_websocket(self, request: WebSocket) -> WebSocket:
        """A page on an origin not listed: the handshake completes and the socket closes at
        once (4403) with the reason, which the page's CloseEvent holds and a graphql-ws
        client reports; a 403 handshake tells the page nothing. No message is read."""
        origin = request.headers.get("origin", "")
        reason = refusal(origin, self.allowed_origins, short=True) or "origin refused"
        offered = request.scope.get("subprotocols", [])
        subprotocol = (
            GRAPHQL_TRANSPORT_WS_PROTOCOL if GRAPHQL_TRANSPORT_WS_PROTOCOL in offered else None
        )
        await request.accept(subprotocol=subprotocol)
        await request.close(code=WS_FORBIDDEN, reason=reason)
        return request

    async def render_graphql_ide(self, request: Request) -> Response:
        return graphiql.page()
