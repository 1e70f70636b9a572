"""The assembled schema with its limits, and its SDL export (`schema.graphql`)."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path

import strawberry
from graphql import ExecutionResult
from graphql.error import GraphQLError
from strawberry.extensions import AddValidationRules, MaxTokensLimiter, SchemaExtension
from strawberry.types import ExecutionContext
from strawberry.types.graphql import OperationType

from resolvers.common.context import OperationLoaders
from schema.access.audit import audit_every_mutation
from schema.access.types import Org
from schema.advisor.types import AdvisorFinding
from schema.apps.types import App
from schema.cloud_accounts.types import CloudAccount
from schema.cloudspaces.types import CloudSpace
from schema.common.scalars import CONFIG
from schema.engine.errors import ErrorPolicy
from schema.engine.execution import Executor
from schema.engine.field_plans import assert_type_checks_ignore_info
from schema.engine.input_text import guard_fields, unguarded_fields
from schema.engine.limits import MAX_TOKENS, DocumentLimits
from schema.engine.operation_metrics import OperationMetrics
from schema.engine.parse_cache import ParsedDocuments, ValidatedDocuments
from schema.engine.policies import DeniedFields
from schema.engine.subscription_rules import NoMintingInSubscriptions
from schema.roots import Mutation, Query, Subscription
from schema.spaces.types import Environment, Space

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


# The object types with fields that take arguments; the assertion below names any other.
guard_fields(Mutation, [Query, Subscription, CloudAccount, Space, CloudSpace, Environment, App])
audit_every_mutation(Mutation)
schema = SpacedockSchema(
    query=Query,
    mutation=Mutation,
    subscription=Subscription,
    types=[Org, CloudAccount, Space, Environment, CloudSpace, App, AdvisorFinding],
    config=CONFIG,
    execution_context_class=Executor,
    extensions=[
        OperationMetrics,  # first: it times the others too
        partial(MaxTokensLimiter, max_token_count=MAX_TOKENS),
        ParsedDocuments,
        DocumentLimits,
        partial(AddValidationRules, [NoMintingInSubscriptions]),
        ValidatedDocuments,
        SubscriptionsOverWebSocket,
        OperationLoaders,
        DeniedFields,
        ErrorPolicy,
    ],
)
assert_type_checks_ignore_info(schema._schema)
assert not unguarded_fields(schema._schema), unguarded_fields(schema._schema)


def sdl() -> str:
    return schema.as_str() + "\n"
