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

import asyncio
import contextlib
import hashlib
import json
import logging
import re
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import orjson
from cross_web import AsyncHTTPRequestAdapter, HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Message, Receive, Scope, Send
from starlette.websockets import WebSocket, WebSocketDisconnect
from strawberry.asgi import ASGIWebSocketAdapter, GraphQL
from strawberry.http import GraphQLHTTPResponse, GraphQLRequestData
from strawberry.http.parse_content_type import parse_content_type
from strawberry.subscriptions import GRAPHQL_TRANSPORT_WS_PROTOCOL
from strawberry.subscriptions.protocols.graphql_transport_ws.handlers import (
    BaseGraphQLTransportWSHandler,
    Operation,
    _OperationStreamClosed,
)
from strawberry.subscriptions.protocols.graphql_transport_ws.types import (
    CompleteMessage,
    ErrorMessage,
)
from strawberry.subscriptions.protocols.graphql_transport_ws.types import (
    Message as WSMessage,
)
from strawberry.types.execution import ExecutionResult, PreExecutionError
from strawberry.types.graphql import OperationType

from api import graphiql
from api.shared_subscriptions import GroupKey, SharedSubscriptions
from core.auth import Unauthenticated, authenticate
from core.rbac import Viewer
from core.services import Services, utcnow
from core.sessions import Session, Sessions, expiry_reason
from db.outages import is_unavailable, outages
from resolvers.context import Context
from resolvers.subscriptions import SubscriptionMode
from schema.build import schema
from schema.parse_cache import operation_type

log = logging.getLogger("spacedock.transport")

MAX_SUBSCRIPTIONS_PER_CONNECTION = 100
# JSON nested deeper than this is no GraphQL request (variables are a few levels deep);
# refusing it early keeps the decoder's recursion and our own walks short.
MAX_JSON_NESTING = 32
BAD_REQUEST = "BAD_REQUEST"
SERVICE_UNAVAILABLE = "SERVICE_UNAVAILABLE"
INTERNAL_SERVER_ERROR = "INTERNAL_SERVER_ERROR"
# WebSocket close codes (RFC 6455) besides graphql-transport-ws's 4400: "try again later" and
# "internal error".
WS_TRY_AGAIN_LATER = 1013
WS_INTERNAL_ERROR = 1011


@dataclass(frozen=True)
class TransportLimits:
    """The transport's settings (SPACEDOCK_MAX_BODY_BYTES, _REQUEST_READ_TIMEOUT_S,
    _MAX_SUBSCRIPTIONS_PER_TOKEN)."""

    max_body_bytes: int = 1024 * 1024
    read_timeout_s: float = 5.0
    max_subscriptions_per_token: int = 500


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(
        {"errors": [{"message": message, "extensions": {"code": code}}]},
        status_code=status,
        headers=headers,
    )


def unauthenticated(message: str) -> JSONResponse:
    return error_response(
        401, "UNAUTHENTICATED", message, {"WWW-Authenticate": 'Bearer realm="spacedock"'}
    )


def database_unavailable() -> JSONResponse:
    return error_response(
        503,
        SERVICE_UNAVAILABLE,
        "The database is unreachable; try again shortly.",
        {"Retry-After": "5"},
    )


def request_id_of(given: str | None) -> str:
    """The client's X-Request-Id when it is a plain token (letters, digits, ._-, at most 64),
    else a new one, so audit events can be matched to requests."""
    if given is not None and REQUEST_ID.fullmatch(given):
        return given
    return uuid.uuid4().hex


def authorization_of(params: dict[str, Any]) -> str | None:
    """The Authorization entry of a connection_init payload, its key in any case, at the
    top (`{"Authorization": …}`) or under `headers` (Apollo's GraphQLWsLink habit)."""
    headers = params.get("headers")
    for found in (params, headers if isinstance(headers, dict) else {}):
        for key, value in found.items():
            if key.lower() == "authorization" and isinstance(value, str):
                return value
    return None


WS_FORBIDDEN = 4403
REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
SEND_A_TOKEN = 'Send {"Authorization": "Bearer <token>"} in the connection_init payload.'


class Refused(Exception):
    """connection_init refused; `reason` (at most 123 bytes) tells the client what to send."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def nesting_of(value: object) -> int:
    """How deeply JSON arrays and objects nest in `value` (walked without recursion)."""
    deepest, pending = 0, [(value, 1)]
    while pending:
        item, level = pending.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            if level <= MAX_JSON_NESTING:
                pending.extend((inner, level + 1) for inner in _children(item))
    return deepest


def _children(container: dict[str, object] | list[object]) -> list[object]:
    return list(container.values()) if isinstance(container, dict) else container


def _no_constant(name: str) -> object:
    """NaN and Infinity are Python's extension of JSON, not JSON."""
    raise json.JSONDecodeError(f"{name} is not JSON", name, 0)


def decoded_json(data: str | bytes) -> object:
    """JSON text as Python, or JSONDecodeError for anything else (invalid UTF-8, nesting
    deeper than MAX_JSON_NESTING), so both transports answer it as a client fault."""
    try:
        value = json.loads(data, parse_constant=_no_constant)
    except json.JSONDecodeError:
        raise
    except (ValueError, RecursionError) as error:  # invalid UTF-8; nesting past the stack
        raise json.JSONDecodeError(f"not JSON text ({type(error).__name__})", "", 0) from None
    if nesting_of(value) > MAX_JSON_NESTING:
        raise json.JSONDecodeError(f"JSON nested deeper than {MAX_JSON_NESTING} levels", "", 0)
    return value


def encoded_json(data: object) -> str:
    """The compact JSON Strawberry writes with json.dumps, by orjson: several times faster
    on a page (issue 12). A str, as WebSocket text frames need; json.dumps for what orjson
    refuses (integers beyond 64 bits, non-string keys)."""
    try:
        return orjson.dumps(data).decode()
    except TypeError:
        return json.dumps(data, separators=(",", ":"))


def request_data(data: object, protocol: Any) -> GraphQLRequestData:
    """One GraphQL request from a decoded body; HTTPException 400 naming what is wrong."""
    if isinstance(data, list):
        raise HTTPException(400, "Batching is not supported: send one operation per request.")
    if not isinstance(data, dict):
        raise HTTPException(
            400, 'The request body must be a JSON object such as {"query": "{ viewer { role } }"}.'
        )
    expected = {
        "query": (str, "a string"),
        "variables": (dict, "an object"),
        "operationName": (str, "a string"),
        "extensions": (dict, "an object"),
    }
    for key, (kind, what) in expected.items():
        if data.get(key) is not None and not isinstance(data[key], kind):
            raise HTTPException(400, f"`{key}` must be {what} or null.")
    return GraphQLRequestData(
        query=data.get("query"),
        variables=data.get("variables"),
        operation_name=data.get("operationName"),
        extensions=data.get("extensions"),
        protocol=protocol,
    )


async def read_body(request: Request, limits: TransportLimits) -> bytes:
    """The whole body, refused past `max_body_bytes` or when it arrives too slowly."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limits.max_body_bytes:
        raise HTTPException(413, too_large(limits))
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(limits.read_timeout_s):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limits.max_body_bytes:
                    raise HTTPException(413, too_large(limits))
                chunks.append(chunk)
    except TimeoutError:
        raise HTTPException(
            408, f"The request body did not arrive within {limits.read_timeout_s:g} s."
        ) from None
    return b"".join(chunks)


def too_large(limits: TransportLimits) -> str:
    return (
        f"The request body exceeds {limits.max_body_bytes} bytes "
        "(the server's SPACEDOCK_MAX_BODY_BYTES)."
    )


def replaying(body: bytes, receive: Receive) -> Receive:
    """A `receive` that hands over the body already read, then listens for a disconnect."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def _token_key(authorization: str | None) -> str:
    """Who holds a subscription, without keeping the credential itself in memory."""
    return hashlib.sha256((authorization or "").encode()).hexdigest()


class SubscriptionCounts:
    """Operations open per credential across every connection of this process."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open: Counter[str] = Counter()

    def take(self, key: str) -> bool:
        if self.open[key] >= self.limit:
            return False
        self.open[key] += 1
        return True

    def give_back(self, key: str) -> None:
        self.open[key] -= 1
        if self.open[key] <= 0:
            del self.open[key]


class TransportWS(BaseGraphQLTransportWSHandler[Context, None]):
    """graphql-transport-ws with every incoming message checked for shape first: strawberry
    indexes into messages as if they were well-formed, and a frame like `[1]` or `null`
    used to drop the socket with a traceback."""

    view: GraphQLView

    async def handle_connection_init(self, message: Any) -> None:
        try:
            await super().handle_connection_init(message)
        except Refused as refused:
            await self.websocket.close(code=WS_FORBIDDEN, reason=refused.reason)
            return
        # issue 11: a connection lives no longer than its credential (core.sessions).
        if self.connection_acknowledged and self.context.viewer is not None:
            self.session = self.view.sessions.open(self.context.viewer, self.end_session)

    async def handle_message(self, message: WSMessage) -> None:
        problem = message_problem(message)
        if problem is not None:
            await self.handle_invalid_message(problem)
            return
        if message["type"] == "subscribe" and self.connection_acknowledged:
            await self.subscribe_counted(message)
            return
        try:
            await super().handle_message(message)
        except Exception as error:
            if is_unavailable(error):
                outages.failed(error)
                await self.websocket.close(
                    WS_TRY_AGAIN_LATER, "database unavailable; retry shortly"
                )
            else:  # a bug: logged once, and the client is told rather than dropped
                log.exception("unexpected error handling a %s message", message["type"])
                await self.websocket.close(WS_INTERNAL_ERROR, "internal server error")

    session: Session | None = None
    ended = False

    async def shutdown(self) -> None:
        if self.session is not None:
            self.view.sessions.close(self.session)
        await super().shutdown()

    async def end_session(self, reason: str) -> None:
        """Stops every operation, then closes 4403 with the reason; nothing is sent after."""
        self.ended = True
        for operation_id in list(self.operations):
            await self.cleanup_operation(operation_id)
        await self.websocket.close(WS_FORBIDDEN, reason)

    async def send_message(self, message: Any) -> None:
        if self.ended:
            return
        viewer = self.context.viewer
        if viewer is not None and (reason := expiry_reason(viewer, utcnow())) is not None:
            await self.end_session(reason)
            return
        await super().send_message(message)

    async def subscribe_counted(self, message: Any) -> None:
        """Starts the operation unless its credential already holds the most it may."""
        counts = self.view.subscriptions
        key = _token_key(authorization_of(self.context.connection_params))
        if message["id"] in self.operations:
            await super().handle_message(message)  # strawberry closes 4409
            return
        if not counts.take(key):
            error: Any = {
                "message": f"This token holds {counts.limit} subscriptions already; "
                "complete some before starting more.",
                "extensions": {"code": "BAD_USER_INPUT"},
            }
            await self.send_message(ErrorMessage(id=message["id"], type="error", payload=[error]))
            return
        await super().handle_message(message)
        operation = self.operations.get(message["id"])
        if operation is None or operation.task is None:
            counts.give_back(key)
            return
        operation.task.add_done_callback(lambda _task: counts.give_back(key))
        # A burst of subscribe frames would otherwise start every operation in one turn of
        # the event loop (100 frames: ~300 ms with nobody else served); one at a time, each
        # starts in its own turn and other clients are served in between.
        await asyncio.sleep(0)

    async def run_operation(self, operation: Operation[Context, None]) -> None:
        """A subscription joins the group of those who would see the same
        (api.shared_subscriptions) once its own checks pass; anything else runs alone."""
        viewer = self.context.viewer
        kind = operation_type(operation.query, operation.operation_name)
        if viewer is None or kind is not OperationType.SUBSCRIPTION:
            await super().run_operation(operation)
            return
        try:
            if not await self.admit(operation):
                return
            key = GroupKey.of(
                operation.query, operation.operation_name, operation.variables, viewer
            )
            member = Subscriber(self, operation.id)
            stream = partial(self.group_stream, operation, viewer)
            await self.view.shared.attend(key, member, stream)
            await operation.send_operation_message(
                CompleteMessage(id=operation.id, type="complete")
            )
        except _OperationStreamClosed:  # strawberry closed the socket 4400, as its own path does
            return
        except Exception as error:
            await self.handle_task_exception(error)
            with contextlib.suppress(Exception):
                await operation.send_operation_message({"id": operation.id, "type": "complete"})
            self.operations.pop(operation.id, None)
            raise

    async def admit(self, operation: Operation[Context, None]) -> bool:
        """Runs the subscription's own checks for this subscriber; a refusal is answered
        here as strawberry answers it (an error, or `next` with errors and `complete`)."""
        checks = await self.schema.subscribe(
            operation.query,
            variable_values=operation.variables,
            context_value=self.context,
            root_value=SubscriptionMode(admit_only=True),
            operation_name=operation.operation_name,
        )
        async with contextlib.aclosing(checks):
            async for result in checks:
                if isinstance(result, PreExecutionError):
                    await self._handle_pre_execution_error(operation, result)
                    return False
                await operation.send_next(result)
                await operation.send_operation_message(
                    CompleteMessage(id=operation.id, type="complete")
                )
                return False
        return True

    async def group_stream(
        self, operation: Operation[Context, None], viewer: Viewer, on_listening: Callable[[], None]
    ) -> AsyncIterator[ExecutionResult]:
        """The group's one run of the subscription, as a viewer of its key."""
        context = Context(
            services=self.view.services,
            viewer=viewer,
            over_websocket=True,
            request_id=self.context.request_id,
        )
        return await self.schema.subscribe(  # type: ignore[return-value]
            operation.query,
            variable_values=operation.variables,
            context_value=context,
            root_value=SubscriptionMode(on_listening=on_listening),
            operation_name=operation.operation_name,
        )

    async def deliver_next(self, operation_id: str, payload: str) -> None:
        """One `next` frame with a payload serialised once for its whole group."""
        if self.ended or operation_id not in self.operations:
            return
        viewer = self.context.viewer
        if viewer is not None and (reason := expiry_reason(viewer, utcnow())) is not None:
            await self.end_session(reason)
            return
        frame = f'{{"id":{json.dumps(operation_id)},"type":"next","payload":{payload}}}'
        assert isinstance(self.websocket, ASGIWebSocketAdapter)
        with contextlib.suppress(WebSocketDisconnect):  # its own handler sees it and cleans up
            await self.websocket.ws.send_text(frame)


@dataclass(eq=False)
class Subscriber:
    """One subscription operation of one connection, as a member of a shared group."""

    handler: TransportWS
    operation_id: str

    async def deliver(self, payload: str) -> None:
        await self.handler.deliver_next(self.operation_id, payload)

    async def drop(self, code: int, reason: str) -> None:
        await self.handler.websocket.close(code, reason)


def only_unavailable(answer: GraphQLHTTPResponse) -> bool:
    """No data, and every error says the database is unreachable."""
    errors: list[Any] = list(answer.get("errors") or [])
    codes = {(error.get("extensions") or {}).get("code") for error in errors}
    return answer.get("data") is None and codes == {SERVICE_UNAVAILABLE}


def message_problem(message: object) -> str | None:
    """Why a decoded frame is no graphql-transport-ws message; None when it may be handled."""
    if not isinstance(message, dict) or not isinstance(message.get("type"), str):
        return "Each message must be a JSON object with a string `type`."
    kind = message["type"]
    if kind in ("connection_init", "ping", "pong"):
        payload = message.get("payload")
        if payload is not None and not isinstance(payload, dict):
            return f"The `payload` of {kind} must be an object."
        return None
    if kind in ("subscribe", "complete") and (
        not isinstance(message.get("id"), str) or not message["id"]
    ):
        return f"A {kind} message needs a non-empty string `id`."
    if kind == "subscribe":
        payload = message.get("payload")
        if not isinstance(payload, dict):
            return "The `payload` of subscribe must be an object with a `query`."
        if not isinstance(payload.get("query"), str):
            return "The subscribe payload's `query` must be a string."
        for key, kind_, what in (
            ("variables", dict, "an object"),
            ("operationName", str, "a string"),
            ("extensions", dict, "an object"),
        ):
            if payload.get(key) is not None and not isinstance(payload[key], kind_):
                return f"The subscribe payload's `{key}` must be {what} or null."
    return None


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
            # A browser WebSocket from another origin is refused (HTTP 403 at the handshake)
            # unless listed in SPACEDOCK_CORS_ORIGINS; clients that send no Origin pass.
            allowed_origins=allowed_origins,
        )
        self.services = services
        self.limits = limits or TransportLimits()
        self.subscriptions = SubscriptionCounts(self.limits.max_subscriptions_per_token)
        self.sessions = sessions or Sessions()
        self.shared = SharedSubscriptions()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)
            return
        try:
            response = await self.answer(scope, receive)
        except HTTPException as refused:
            headers = {"Connection": "close"} if refused.status_code in (408, 413) else None
            response = error_response(refused.status_code, BAD_REQUEST, refused.reason, headers)
        except Exception as error:
            if is_unavailable(error):
                outages.failed(error)
                response = database_unavailable()
            else:  # a bug: logged here once, answered in JSON like every other error
                log.exception("unexpected error answering %s /graphql", scope.get("method"))
                response = error_response(500, INTERNAL_SERVER_ERROR, "Internal server error")
        await response(scope, receive, send)

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
            return unauthenticated(refused.message)
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

    def encode_json(self, data: object) -> str:
        return encoded_json(data)

    async def parse_http_body(
        self, request: AsyncHTTPRequestAdapter
    ) -> GraphQLRequestData | list[GraphQLRequestData]:
        transport = self._get_stream_transport_from_headers(request.headers)
        protocol = transport.protocol if transport else "http"
        if request.method == "GET":
            return request_data(self.parse_query_params(request.query_params), protocol)
        content_type, _ = parse_content_type(request.content_type or "")
        if content_type != "application/json":
            raise HTTPException(415, "Send the request as Content-Type: application/json.")
        return request_data(self.parse_json(await request.get_body()), protocol)

    async def get_context(
        self, request: Request | WebSocket, response: Response | WebSocket | None = None
    ) -> Context:
        return Context(
            services=self.services,
            viewer=request.scope.get("state", {}).get("viewer"),
            over_websocket=isinstance(request, WebSocket),
            request_id=request_id_of(request.headers.get("x-request-id")),
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

    async def render_graphql_ide(self, request: Request) -> Response:
        return graphiql.page()
