"""graphql-transport-ws as spacedock serves it: a socket that lives no longer than its
credential (4403 with the reason, nothing sent after), subscriptions admitted one by one
and streamed once per group of subscribers (api.shared_subscriptions), and sends
withdrawn when the caller loses the right to them. What a client must send and may
hold is api.ws_admission."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from functools import lru_cache, partial
from typing import Any, Protocol, cast

from starlette.websockets import WebSocketDisconnect
from strawberry.asgi import ASGIWebSocketAdapter
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

from api.http_requests import encoded_json
from api.shared_subscriptions import GroupKey, SharedSubscriptions
from api.ws_admission import (
    WS_FORBIDDEN,
    WS_INTERNAL_ERROR,
    WS_TRY_AGAIN_LATER,
    Refused,
    SubscriptionCounts,
    message_problem,
)
from core.access.sessions import Session, Sessions, expiry_reason
from core.common.errors import Skipped
from core.common.rbac import Viewer
from core.common.services import Services, utcnow
from db.outages import is_unavailable, outages
from resolvers.common.context import Context
from resolvers.common.subscription_mode import SubscriptionMode
from schema.engine.parse_cache import operation_type

log = logging.getLogger("spacedock.transport")


class ServingView(Protocol):
    """What a socket needs of the view that accepted it (api.graphql_view.GraphQLView)."""

    services: Services
    sessions: Sessions
    subscriptions: SubscriptionCounts
    shared: SharedSubscriptions


class TransportWS(BaseGraphQLTransportWSHandler[Context, None]):
    """graphql-transport-ws with every incoming message checked for shape first: strawberry
    indexes into messages as if they were well-formed, and a frame like `[1]` or `null`
    used to drop the socket with a traceback."""

    @property
    def served(self) -> ServingView:
        """The view that accepted this socket, as far as the socket uses it."""
        return cast(ServingView, self.view)

    async def handle_connection_init(self, message: Any) -> None:
        try:
            await super().handle_connection_init(message)
        except Refused as refused:
            await self.websocket.close(code=WS_FORBIDDEN, reason=refused.reason)
            return
        # issue 11: a connection lives no longer than its credential (core.access.sessions).
        if self.connection_acknowledged and self.context.viewer is not None:
            self.session = self.served.sessions.open(self.context.viewer, self)

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

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        assert isinstance(self.websocket, ASGIWebSocketAdapter)
        self.send_text = self.websocket.ws.send_text
        # The policies each subscription was admitted under, by operation id.
        self._admitted: dict[str, frozenset[str]] = {}
        # Tasks waiting for the socket to take a frame, by operation id, and those of them
        # told to give up (`_withdraw`).
        self._sending: dict[asyncio.Task[Any], str] = {}
        self._withdrawn: set[asyncio.Task[Any]] = set()
        self._background: set[asyncio.Task[None]] = set()

    async def shutdown(self) -> None:
        if self.session is not None:
            self.served.sessions.close(self.session)
        await super().shutdown()

    # -- the credential (core.access.sessions): nothing is sent that it no longer allows --------

    def stop(self, reason: str) -> None:
        """core.access.sessions.Connection: nothing more is sent; the close follows."""
        if self._stopping():
            self._later(self._close(WS_FORBIDDEN, reason))

    async def end_session(self, reason: str, code: int = WS_FORBIDDEN) -> None:
        """Stops every operation, then closes (4403) with the reason; nothing is sent after."""
        if self._stopping():
            await self._close(code, reason)

    def _stopping(self) -> bool:
        """Marks the connection stopped and withdraws what it was about to send; False
        when it already was."""
        if self.ended:
            return False
        self.ended = True
        self._withdraw()
        return True

    async def _close(self, code: int, reason: str) -> None:
        for operation_id in list(self.operations):
            await self.cleanup_operation(operation_id)
        await self.websocket.close(code, reason)

    def regrant(self, viewer: Viewer) -> None:
        """core.access.sessions.Connection: the role's policies changed. A subscription admitted
        under a policy the role lost ends with FORBIDDEN at once; new operations run as
        `viewer`."""
        self.context.viewer = viewer
        granted = set(viewer.permissions)
        for operation_id, admitted in list(self._admitted.items()):
            lost = sorted(admitted - granted)
            operation = self.operations.pop(operation_id, None) if lost else None
            if operation is None:
                continue
            self._admitted.pop(operation_id, None)
            self._withdraw(operation_id)
            assert operation.task is not None
            operation.task.cancel()
            error: Any = {
                "message": f"Your role {viewer.role_name} no longer grants {', '.join(lost)}; "
                "subscribe again to go on with what it grants now.",
                "extensions": {"code": "FORBIDDEN"},
            }
            self._later(
                self.send_message(ErrorMessage(id=operation_id, type="error", payload=[error]))
            )

    def withdraw_sends(self) -> None:
        """core.access.sessions.Connection: the session's verification lapsed."""
        self._withdraw()

    def _withdraw(self, operation_id: str | None = None) -> None:
        """Frames (of one operation, or all) still waiting for the socket are not written:
        a send waits for the socket before it writes anything, and is cancelled here."""
        for task, sending in self._sending.items():
            if (operation_id is None or sending == operation_id) and task not in self._withdrawn:
                self._withdrawn.add(task)
                task.cancel()

    def _later(self, work: Coroutine[Any, Any, None]) -> None:
        async def run() -> None:
            with contextlib.suppress(Exception):  # a socket already gone
                await work

        task = asyncio.create_task(run())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def send_message(self, message: Any) -> None:
        if self.ended:
            return
        if message.get("type") == "next":
            await self.deliver_frame(message["id"], encoded_json(message))
            return
        viewer = self.context.viewer
        if viewer is not None and (reason := expiry_reason(viewer, utcnow())) is not None:
            await self.end_session(reason)
            return
        await super().send_message(message)

    async def deliver_frame(self, operation_id: str, frame: str) -> None:
        """One `next` frame, written only while the connection's credential holds as
        verified (core.access.sessions): not after a revocation, a policy this operation was
        admitted under was taken away, or the verification lapsed unrenewed. Every
        subscriber's every event passes here, so it is one coroutine, not a chain of them
        (issue 20: each µs is 5 ms an event at 5,000 subscribers)."""
        sessions = self.served.sessions
        while not self.ended and operation_id in self.operations:
            viewer = self.context.viewer
            if (
                viewer is not None
                and viewer.expires_at is not None
                and (reason := expiry_reason(viewer, utcnow())) is not None
            ):
                await self.end_session(reason)
                return
            session = self.session
            if session is not None and not sessions.deliverable(session):
                if not await self._verified(session):
                    return
                continue
            # Registered while it waits for the socket, so that `_withdraw` can cancel it
            # before it writes anything.
            task = asyncio.current_task()
            assert task is not None
            self._sending[task] = operation_id
            try:
                await self.send_text(frame)
            except WebSocketDisconnect:
                pass  # its own handler cleans up
            except asyncio.CancelledError:
                if task not in self._withdrawn or task.uncancel() > 0:
                    raise  # cancelled by someone else too: the fan-out's timeout, a shutdown
            finally:
                del self._sending[task]
                self._withdrawn.discard(task)
            return

    async def _verified(self, session: Session) -> bool:
        """Waits for a check of the session's credential; False when there is none to be
        had (the session closed, or the check failed and the socket is closed for it)."""
        try:
            return await self.served.sessions.verified(session)
        except Exception as error:
            if is_unavailable(error):
                outages.failed(error)
                await self.end_session("database unavailable; retry shortly", WS_TRY_AGAIN_LATER)
            else:
                log.exception("checking a WebSocket's credential failed")
                await self.end_session("internal server error", WS_INTERNAL_ERROR)
            return False

    async def subscribe_counted(self, message: Any) -> None:
        """Starts the operation unless its credential already holds the most it may."""
        counts = self.served.subscriptions
        key = self.context.caller.credential
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
        # Recorded first, so a regrant during admission ends it too (`regrant`).
        self._admitted[operation.id] = _policies(viewer.permissions)
        try:
            if not await self.admit(operation):
                return
            key = GroupKey.of(
                operation.query, operation.operation_name, operation.variables, viewer
            )
            member = Subscriber(self, operation.id)
            stream = partial(self.group_stream, operation, viewer)
            await self.served.shared.attend(key, member, stream)
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
        finally:
            self._admitted.pop(operation.id, None)

    async def admit(self, operation: Operation[Context, None]) -> bool:
        """Runs the subscription's own checks for this subscriber; a refusal is answered
        here as strawberry answers it (an error, or `next` with errors and `complete`).
        Ids it follows that name nothing (core.common.errors.Skipped) are reported in a
        first `next` (data null, NOT_FOUND with the ids), and the subscription goes on."""
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
                if only_skipped(result):
                    return True
                # Not when the socket was closed meanwhile (a database outage closes it
                # 1013 and forgets its operations): strawberry's complete then raised
                # KeyError, a traceback per subscriber in the soak's cut minute.
                if operation.id in self.operations:
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
            services=self.served.services,
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


def only_skipped(result: ExecutionResult) -> bool:
    """The subscriber's checks found nothing wrong but ids to skip."""
    errors = result.errors or []
    return bool(errors) and all(isinstance(error.original_error, Skipped) for error in errors)


# One frozenset per distinct role, shared by its subscriptions (2 KiB each otherwise).
_policies: Callable[[tuple[str, ...]], frozenset[str]] = lru_cache(maxsize=64)(frozenset)


class Subscriber:
    """One subscription operation of one connection, as a member of a shared group."""

    __slots__ = ("_frame_start", "handler", "operation_id")

    def __init__(self, handler: TransportWS, operation_id: str) -> None:
        self.handler = handler
        self.operation_id = operation_id
        self._frame_start = f'{{"id":{json.dumps(operation_id)},"type":"next","payload":'

    def deliver(self, payload: str) -> Awaitable[None]:
        """One `next` frame with a payload serialised once for its whole group."""
        return self.handler.deliver_frame(self.operation_id, f"{self._frame_start}{payload}}}")

    async def drop(self, code: int, reason: str) -> None:
        # As any end of the session: its operations stop and nothing (no `complete`) is
        # sent after the close.
        await self.handler.end_session(reason, code)
