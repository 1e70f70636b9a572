"""Parsed and validated documents reused across requests (issue 12): a frontend sends
the same few query texts again and again, and parsing or validating one again costs as
much as the first time.

Only documents that parse are kept, and only as many as PARSED_KEPT (least recently used
dropped first). A text that does not parse, or has more tokens than the limit, is left
to strawberry's own parse, which answers it as before; the token limit is part of the
cache key, so a cached document never skips it. Validation depends on the document and
the schema only: a text that passed graphql-core's rules once skips them afterwards
(kept as long as its parse); one that failed them is validated every time.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

from graphql import DocumentNode, GraphQLError, get_operation_ast, parse
from strawberry.extensions import SchemaExtension
from strawberry.types.graphql import OperationType

from schema.engine.limits import MAX_TOKENS

PARSED_KEPT = 256


@lru_cache(maxsize=PARSED_KEPT)
def _parsed(query: str, max_tokens: int | None) -> DocumentNode:
    return parse(query, max_tokens=max_tokens)


def operation_type(query: str, operation_name: str | None) -> OperationType | None:
    """The type of the operation a request would run; None when the text does not parse
    within the token limit or names no single operation (strawberry then answers it)."""
    try:
        document = _parsed(query, MAX_TOKENS)
    except GraphQLError:
        return None
    operation = get_operation_ast(document, operation_name)
    return None if operation is None else OperationType(operation.operation.value)


class ParsedDocuments(SchemaExtension):
    """Runs after MaxTokensLimiter has set the token limit of the operation."""

    def on_parse(self) -> Iterator[None]:
        execution = self.execution_context
        if execution.query and execution.graphql_document is None:
            # One that fails is parsed again by strawberry, which answers the error as usual.
            with contextlib.suppress(GraphQLError):
                execution.graphql_document = _parsed(
                    execution.query, execution.parse_options.get("max_tokens")
                )
        yield


# (query text, token limit, validation rules) of the documents that passed validation.
_valid: OrderedDict[tuple[Any, ...], None] = OrderedDict()


class ValidatedDocuments(SchemaExtension):
    """Runs after DocumentLimits, whose refusals come first and are never cached."""

    def on_validate(self) -> Iterator[None]:
        execution = self.execution_context
        key = None
        if execution.query and execution.pre_execution_errors is None:
            key = (
                execution.query,
                execution.parse_options.get("max_tokens"),
                tuple(execution.validation_rules),
            )
            if key in _valid:
                _valid.move_to_end(key)
                # Set before validation runs, this skips it (strawberry's _run_validation).
                execution.pre_execution_errors = []
                key = None
        yield
        if key is not None and execution.pre_execution_errors == []:
            _valid[key] = None
            if len(_valid) > PARSED_KEPT:
                _valid.popitem(last=False)
