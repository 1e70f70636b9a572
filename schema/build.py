"""The assembled schema with its limits, and its SDL export (`schema.graphql`)."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import strawberry
from graphql.error import GraphQLError
from strawberry.extensions import MaxAliasesLimiter, MaxTokensLimiter, QueryDepthLimiter
from strawberry.types import ExecutionContext

from schema.errors import ErrorPolicy
from schema.mutation import Mutation
from schema.query import Query
from schema.subscription import Subscription
from schema.types import CloudAccount, Environment, Org, Space

MAX_DEPTH = 10
MAX_ALIASES = 15
MAX_TOKENS = 2000
SDL_PATH = Path(__file__).resolve().parent.parent / "schema.graphql"


class SpacedockSchema(strawberry.Schema):
    def process_errors(
        self, errors: list[GraphQLError], execution_context: ExecutionContext | None = None
    ) -> None:
        """Errors are logged by ErrorPolicy, once and without client-side noise."""


schema = SpacedockSchema(
    query=Query,
    mutation=Mutation,
    subscription=Subscription,
    types=[Org, CloudAccount, Space, Environment],
    extensions=[
        partial(QueryDepthLimiter, max_depth=MAX_DEPTH),
        partial(MaxAliasesLimiter, max_alias_count=MAX_ALIASES),
        partial(MaxTokensLimiter, max_token_count=MAX_TOKENS),
        ErrorPolicy,
    ],
)


def sdl() -> str:
    return schema.as_str() + "\n"
