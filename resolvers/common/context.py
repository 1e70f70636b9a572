"""The GraphQL context: who is calling, the shared services, and the loaders of the
operation running now.

strawberry builds one context per HTTP request but only one per WebSocket connection,
which carries many operations, some at once. So the loaders do not live on the
context: `OperationLoaders`, a schema extension, gives every operation its own set in
a ContextVar of the operation's task (strawberry runs each operation of a socket in a
task of its own), and a subscription takes a new set for every event
(`fresh_loaders`). A query over a socket never reads rows cached by an earlier one,
and two subscriptions on one connection never swap each other's loaders.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from strawberry.extensions import SchemaExtension
from strawberry.types.graphql import OperationType

from core.common.rbac import Viewer
from core.common.services import Services
from resolvers.common.loaders import Loaders

_operation_loaders: ContextVar[Loaders | None] = ContextVar(
    "spacedock_operation_loaders", default=None
)


@dataclass
class Context:
    services: Services
    viewer: Viewer | None = None
    over_websocket: bool = False
    # Set by strawberry from the graphql-transport-ws connection_init payload.
    connection_params: dict[str, Any] = field(default_factory=dict)
    # The HTTP request's (or WebSocket connection's) id, recorded in the audit log.
    request_id: str | None = None

    @property
    def caller(self) -> Viewer:
        assert self.viewer is not None, "the transport authenticates before executing"
        return self.viewer

    @property
    def loaders(self) -> Loaders:
        """This operation's loaders (made here for callers outside GraphQL, such as a
        REST route, whose request is its own task)."""
        loaders = _operation_loaders.get()
        if loaders is None:
            loaders = self.fresh_loaders()
        return loaders

    def fresh_loaders(self, event: str | None = None) -> Loaders:
        """New loaders for the rest of this operation's task: per subscription event, whose
        live calls count against the caller's allowance for that `event` across all its
        subscriptions (core.common.live_calls)."""
        caller = self.caller
        budget = None
        if event is not None:
            budget = self.services.live_calls.event_budget(caller.credential, event)
        loaders = Loaders(self.services, caller.org_id, budget)
        _operation_loaders.set(loaders)
        return loaders


class OperationLoaders(SchemaExtension):
    """Every operation starts with loaders of its own, set before any field runs, so
    the tasks graphql-core spawns for fields share (and batch through) them."""

    async def on_execute(self) -> AsyncIterator[None]:
        execution = self.execution_context
        context = execution.context
        loaders = None
        if isinstance(context, Context) and context.viewer is not None:
            loaders = context.fresh_loaders()
            # A query reads in one transaction. Not a mutation: its payload must see its
            # own write, which an earlier snapshot (SQLite) would not; not a subscription:
            # it waits between events, and each event takes new loaders anyway.
            if execution.operation_type is OperationType.QUERY:
                loaders.keep_one_session()
        try:
            yield
        finally:
            if loaders is not None:
                await loaders.close()
