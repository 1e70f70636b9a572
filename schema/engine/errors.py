"""Every top-level error leaves with an `extensions.code`; unexpected ones are masked.

Domain refusals (`core.common.errors.ApiError`) keep their message and code. Parse
and validation errors get GRAPHQL_VALIDATION_FAILED, and never quote the input
values they reject (inputs carry secrets). A database that cannot be reached is
SERVICE_UNAVAILABLE, logged once per outage. Anything else is a bug:
it is logged here with its traceback and reaches the client only as
INTERNAL_SERVER_ERROR.
"""

from __future__ import annotations

import logging
import re

from graphql.error import GraphQLError
from strawberry.extensions import MaskErrors

from core.common.errors import ApiError
from db.outages import is_unavailable, outages

log = logging.getLogger("spacedock.graphql")

INTERNAL = "INTERNAL_SERVER_ERROR"
UNAVAILABLE = "SERVICE_UNAVAILABLE"
# graphql-core's coercion messages quote the rejected input (`found: {...}`, `value: ...`,
# `Value '...'`); inputs carry secrets, so the quoted part is cut and the path kept.
ECHOES_INPUT = re.compile(r"has invalid value|^Expected value|cannot represent|does not exist in")
QUOTED_INPUT = re.compile(r"(, but encountered error|,? [Ff]ound:?|: ).*$", re.DOTALL)
ENUM_VALUE = re.compile(r"Value '.*' does not exist in", re.DOTALL)


def without_input_values(message: str) -> str:
    """A validation message that names the field and the expected type, never the value."""
    if not ECHOES_INPUT.search(message):
        return message
    head, detail = "", message
    if "has invalid value" in message:
        head, _, detail = message.partition(": ")
    detail = ENUM_VALUE.sub("Value does not exist in", QUOTED_INPUT.sub("", detail)).rstrip(".")
    detail += "" if detail.endswith("?") else "."
    return f"{head}: {detail}" if head else detail


def coded(error: GraphQLError) -> GraphQLError:
    original = error.original_error
    details: dict[str, object] = {}
    if isinstance(original, ApiError):
        code, message, details = original.code, original.message, original.details
    elif original is None or isinstance(original, GraphQLError):
        code = (error.extensions or {}).get("code", "GRAPHQL_VALIDATION_FAILED")
        message = without_input_values(error.message)
    elif is_unavailable(original):
        outages.failed(original)  # one warning per outage, not a traceback per field
        code, message = UNAVAILABLE, "The database is unreachable; try again shortly."
    else:
        log.error("unexpected error at %s", error.path, exc_info=original)
        code, message = INTERNAL, "Internal server error"
    return GraphQLError(
        message,
        nodes=error.nodes,
        source=error.source,
        positions=error.positions,
        path=error.path,
        # Kept for the transport, which tells a subscription's skipped ids from a refusal.
        original_error=original if isinstance(original, ApiError) else None,
        extensions={"code": code, **details},
    )


class ErrorPolicy(MaskErrors):
    def _process_errors(self, errors: list[GraphQLError]) -> list[GraphQLError]:
        return [coded(error) for error in errors]
