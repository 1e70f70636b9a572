"""The request a piece of work belongs to: its id, and its GraphQL operation for /metrics.

An HTTP request, a WebSocket connection and a `spacedock` command each begin a scope
(`begin`), held in a ContextVar, so every log line written while it runs carries its id
(api.logs), and so does every task it starts (asyncio copies the context into a new task):
an audit write after the answer, a subscriber's close. Background loops run outside any
request and carry none.

The id is the client's X-Request-Id when it is a plain token, else a new one; the audit
log records it (AuditEvent.requestId) and the response echoes it.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import Context, ContextVar, Token, copy_context
from dataclasses import dataclass

# What an HTTP request's operation is called in /metrics until GraphQL has executed one.
UNKNOWN_OPERATION = "unknown"
NO_TYPE = "none"

REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")


@dataclass
class RequestScope:
    id: str
    # Labels of the request-latency histogram, set once an operation executes
    # (schema.engine.operation_metrics); an HTTP request carries one operation.
    operation: str = UNKNOWN_OPERATION
    operation_type: str = NO_TYPE


_current: ContextVar[RequestScope | None] = ContextVar("spacedock_request", default=None)


def request_id_of(given: str | None) -> str:
    """The client's X-Request-Id when it is a plain token (letters, digits, ._-, at most 64),
    else a new one: anything else would let a client write into our logs."""
    if given is not None and REQUEST_ID.fullmatch(given):
        return given
    return uuid.uuid4().hex


def current() -> RequestScope | None:
    return _current.get()


def current_id() -> str | None:
    scope = _current.get()
    return None if scope is None else scope.id


def operation_labels() -> tuple[str, str]:
    """The current request's operation and type, as the latency histogram labels them."""
    scope = _current.get()
    return (
        (UNKNOWN_OPERATION, NO_TYPE) if scope is None else (scope.operation, scope.operation_type)
    )


@contextmanager
def begin(given_id: str | None = None) -> Iterator[RequestScope]:
    """A scope for the work done inside the block (and the tasks it starts)."""
    scope, token = enter(given_id)
    try:
        yield scope
    finally:
        leave(token)


def enter(given_id: str | None = None) -> tuple[RequestScope, Token[RequestScope | None]]:
    """`begin` without its generator, for the middleware every request passes: a scope,
    and the token that `leave` takes to end it."""
    scope = RequestScope(request_id_of(given_id))
    return scope, _current.set(scope)


def leave(token: Token[RequestScope | None]) -> None:
    _current.reset(token)


def detached() -> Context:
    """The current context without its request, for a task that serves many requests (a
    shared subscription's run): its lines must not carry the first one's id."""
    context = copy_context()
    context.run(_current.set, None)
    return context
