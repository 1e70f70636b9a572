"""Per-field view policies: every field that reads an object names the policy it needs.

`needs("environment:view")` goes into a field's `extensions`. Without the policy a
nullable field is null with a FORBIDDEN error at its path; a list field the
contract makes non-null is an empty list with that error (nulling it would null
its parent, and with it the rest of the page). Root fields check in their resolvers,
as before; this covers the nested ones, so a new field only declares its policy.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from typing import Any

from graphql import GraphQLError, GraphQLList, GraphQLNonNull, GraphQLObjectType, GraphQLResolveInfo
from strawberry.extensions import FieldExtension, SchemaExtension
from strawberry.schema.schema_converter import GraphQLCoreConverter
from strawberry.types import Info

from core.common.errors import ApiError
from core.common.rbac import ALL_POLICIES

# FORBIDDEN errors of fields answered with an empty list, per operation.
_denied: ContextVar[list[GraphQLError] | None] = ContextVar("spacedock_denied", default=None)


class Needs(FieldExtension):
    def __init__(self, policy: str) -> None:
        assert policy in ALL_POLICIES, f"unknown policy {policy}"
        self.policy = policy

    def permits(self, context: Any) -> bool:
        """Whether the operation's caller holds the policy (the executor asks once per
        operation before serving a prepared answer)."""
        return bool(context.caller.can(self.policy))

    def _allowed(self, info: Info[Any, Any]) -> bool:
        try:
            info.context.caller.require_to_read(self.policy)
        except ApiError as refused:
            raw = info._raw_info
            if isinstance(raw.return_type, GraphQLNonNull) and isinstance(
                raw.return_type.of_type, GraphQLList
            ):
                denied = _denied.get()
                if denied is not None:
                    denied.append(
                        GraphQLError(
                            refused.message,
                            nodes=raw.field_nodes,
                            path=raw.path.as_list(),
                            original_error=refused,
                        )
                    )
                    return False
            raise
        return True

    def resolve(
        self, next_: Callable[..., Any], source: Any, info: Info[Any, Any], **kwargs: Any
    ) -> Any:
        if not self._allowed(info):
            return []
        return next_(source, info, **kwargs)

    async def resolve_async(
        self,
        next_: Callable[..., Awaitable[Any]],
        source: Any,
        info: Info[Any, Any],
        **kwargs: Any,
    ) -> Any:
        if not self._allowed(info):
            return []
        return await next_(source, info, **kwargs)


def viewable(info: GraphQLResolveInfo[Any], type_name: str, field_name: str) -> bool:
    """Whether the caller may view the field `field_name` of `type_name`, by the field's
    own view policies: what a read-ahead asks before loading a field's answer."""
    object_type = info.schema.get_type(type_name)
    assert isinstance(object_type, GraphQLObjectType)
    extensions = object_type.fields[field_name].extensions or {}
    definition = extensions.get(GraphQLCoreConverter.DEFINITION_BACKREF)
    policies = getattr(definition, "extensions", None) or ()
    return all(e.permits(info.context) for e in policies if isinstance(e, Needs))


def needs(policy: str) -> list[FieldExtension]:
    """The `extensions` of a field that needs `policy` (one of core.common.rbac's)."""
    return [Needs(policy)]


class DeniedFields(SchemaExtension):
    """Adds the FORBIDDEN errors of fields answered with an empty list to the result."""

    def on_execute(self) -> Iterator[None]:
        denied: list[GraphQLError] = []
        token = _denied.set(denied)
        try:
            yield
        finally:
            _denied.reset(token)
        result = self.execution_context.result
        if denied and result is not None and hasattr(result, "errors"):
            result.errors = [*(result.errors or []), *denied]
