"""The assembled schema with its limits, and its SDL export (`schema.graphql`)."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path

import strawberry
from graphql import ExecutionResult
from graphql.error import GraphQLError
from strawberry.extensions import MaxTokensLimiter, SchemaExtension
from strawberry.types import ExecutionContext
from strawberry.types.graphql import OperationType

from resolvers.context import OperationLoaders
from schema.audit import audit_every_mutation
from schema.errors import ErrorPolicy
from schema.execution import Executor, assert_type_checks_ignore_info
from schema.input_text import guard_roots
from schema.limits import MAX_TOKENS, DocumentLimits
from schema.mutation import Mutation
from schema.parse_cache import ParsedDocuments, ValidatedDocuments
from schema.policies import DeniedFields
from schema.query import Query
from schema.subscription import Subscription
from schema.types import CloudAccount, CloudSpace, Environment, Org, Space

SDL_PATH = Path(__file__).resolve().parent.parent / "schema.graphql"


class SubscriptionsOverWebSocket(SchemaExtension):
    """A subscription sent over plain HTTP would resolve to null; refuse it clearly instead."""

    def on_execute(self) -> Iterator[None]:
        execution = self.execution_context
        context = execution.context
        if execution.operation_type is OperationType.SUBSCRIPTION and not context.over_websocket:
            message = "Subscriptions run over WebSocket (graphql-transport-ws) at /graphql."
            error = GraphQLError(message, extensions={"code": "BAD_USER_INPUT"})
            execution.result = ExecutionResult(data=None, errors=[error])
        yield


class SpacedockSchema(strawberry.Schema):
    def process_errors(
        self, errors: list[GraphQLError], execution_context: ExecutionContext | None = None
    ) -> None:
        """Errors are logged by ErrorPolicy, once and without client-side noise."""


guard_roots(Mutation, Query)
audit_every_mutation(Mutation)
schema = SpacedockSchema(
    query=Query,
    mutation=Mutation,
    subscription=Subscription,
    types=[Org, CloudAccount, Space, Environment, CloudSpace],
    execution_context_class=Executor,
    extensions=[
        partial(MaxTokensLimiter, max_token_count=MAX_TOKENS),
        ParsedDocuments,
        DocumentLimits,
        ValidatedDocuments,
        SubscriptionsOverWebSocket,
        OperationLoaders,
        DeniedFields,
        ErrorPolicy,
    ],
)
assert_type_checks_ignore_info(schema._schema)


def sdl() -> str:
    return schema.as_str() + "\n"
