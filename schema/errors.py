"""Every top-level error leaves with an `extensions.code`; unexpected ones are masked.

Domain refusals (`core.errors.ApiError`) keep their message and code. Parse
and validation errors get GRAPHQL_VALIDATION_FAILED. Anything else is a bug:
it is logged here with its traceback and reaches the client only as
INTERNAL_SERVER_ERROR.
"""

from __future__ import annotations

import logging

from graphql.error import GraphQLError
from strawberry.extensions import MaskErrors

from core.errors import ApiError

log = logging.getLogger("spacedock.graphql")

INTERNAL = "INTERNAL_SERVER_ERROR"


def coded(error: GraphQLError) -> GraphQLError:
    original = error.original_error
    if isinstance(original, ApiError):
        code, message = original.code, original.message
    elif original is None or isinstance(original, GraphQLError):
        code = (error.extensions or {}).get("code", "GRAPHQL_VALIDATION_FAILED")
        message = error.message
    else:
        log.error("unexpected error at %s", error.path, exc_info=original)
        code, message = INTERNAL, "Internal server error"
    return GraphQLError(
        message,
        nodes=error.nodes,
        source=error.source,
        positions=error.positions,
        path=error.path,
        extensions={"code": code},
    )


class ErrorPolicy(MaskErrors):
    def _process_errors(self, errors: list[GraphQLError]) -> list[GraphQLError]:
        return [coded(error) for error in errors]
