"""The executor: graphql-core's, with plain leaf fields read straight off their objects.

graphql-core runs every field the same way: a Path, a ResolveInfo, Strawberry's resolver
(for a field without one, a wrapper around getattr), then value completion through
several generic steps. Most fields of a page are an object's id, name or status: for
them that is a dozen calls to read an attribute and serialise it, and it was the largest
part of a read's CPU (issue 12). This executor plans each selection set once per
operation: a field that only reads an attribute (no resolver, arguments or field
extensions) of scalar or enum type is read and coerced in place; every other field goes
graphql-core's way. So does a plain field whose value is missing, null where the schema
forbids it, or not coercible: the error and the null rules stay graphql-core's own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any
from weakref import WeakKeyDictionary

from graphql import (
    GraphQLEnumType,
    GraphQLField,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLSchema,
    Undefined,
    is_leaf_type,
)
from graphql.execution.collect_fields import FieldDetailsList, GroupedFieldSet
from graphql.pyutils import AwaitableOrValue, Path
from graphql.pyutils.gather_with_cancel import gather_with_cancel
from strawberry.schema.schema import StrawberryGraphQLCoreExecutionContext
from strawberry.schema.schema_converter import GraphQLCoreConverter
from strawberry.types.field import StrawberryField

_MISSING = object()


@dataclass(frozen=True, slots=True)
class PlainLeaf:
    """How to answer a field that is an attribute of its object, of scalar or enum type."""

    attribute: str
    coerce: Callable[[Any], Any]
    nullable: bool


def _enum_coercion(enum_type: GraphQLEnumType) -> Callable[[Any], Any]:
    """A Python enum member → its GraphQL name as one dict lookup (Strawberry's coercion
    scans the values); anything else goes to the type's own coercion."""
    names = {value.value: name for name, value in enum_type.values.items()}
    wrapped = getattr(enum_type, "wrapped_cls", None)
    members = list(wrapped) if isinstance(wrapped, type) and issubclass(wrapped, Enum) else []
    by_member = {m: names[m.value] for m in members if m.value in names}
    slow = enum_type.coerce_output_value

    def coerce(value: Any) -> Any:
        return by_member[value] if type(value) is wrapped else slow(value)

    return coerce


def plain_leaf(field: GraphQLField) -> PlainLeaf | None:
    """The field's PlainLeaf, or None when it needs graphql-core's full path."""
    definition = (field.extensions or {}).get(GraphQLCoreConverter.DEFINITION_BACKREF)
    if not isinstance(definition, StrawberryField) or not definition.is_basic_field:
        return None
    if field.args:
        return None
    nullable = not isinstance(field.type, GraphQLNonNull)
    leaf_type = field.type.of_type if isinstance(field.type, GraphQLNonNull) else field.type
    if not is_leaf_type(leaf_type):
        return None
    if isinstance(leaf_type, GraphQLEnumType):
        coerce = _enum_coercion(leaf_type)
    else:
        coerce = leaf_type.coerce_output_value  # type: ignore[union-attr]
    return PlainLeaf(definition.python_name, coerce, nullable)


# Per schema: each (type, field)'s PlainLeaf or None, worked out on first use.
_leaves: WeakKeyDictionary[GraphQLSchema, dict[tuple[str, str], PlainLeaf | None]] = (
    WeakKeyDictionary()
)

Plan = Sequence[tuple[str, FieldDetailsList, PlainLeaf | None]]


class Executor(StrawberryGraphQLCoreExecutionContext):
    """Strawberry's executor with planned selection sets (see the module's docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # By the grouped field set's id, with the set itself: held, its id is not reused.
        self._plans: dict[int, tuple[GroupedFieldSet, Plan]] = {}

    def _plan(self, parent_type: GraphQLObjectType, grouped_field_set: GroupedFieldSet) -> Plan:
        cached = self._plans.get(id(grouped_field_set))
        if cached is not None and cached[0] is grouped_field_set:
            return cached[1]
        leaves = _leaves.setdefault(self.schema, {})
        entries = []
        for response_name, details in grouped_field_set.items():
            key = (parent_type.name, details[0].node.name.value)
            if key not in leaves:
                field = parent_type.fields.get(key[1])
                leaves[key] = None if field is None else plain_leaf(field)
            entries.append((response_name, details, leaves[key]))
        self._plans[id(grouped_field_set)] = (grouped_field_set, entries)
        return entries

    def execute_fields(
        self,
        parent_type: GraphQLObjectType,
        source_value: Any,
        path: Path | None,
        grouped_field_set: GroupedFieldSet,
        position_context: Any,
    ) -> AwaitableOrValue[dict[str, Any]]:
        results: dict[str, Any] = {}
        pending: list[str] = []
        is_awaitable = self.is_awaitable
        try:
            for response_name, details, leaf in self._plan(parent_type, grouped_field_set):
                if leaf is not None:
                    value = getattr(source_value, leaf.attribute, _MISSING)
                    if value is None and leaf.nullable:
                        results[response_name] = None
                        continue
                    if value is not None and value is not _MISSING:
                        try:
                            coerced = leaf.coerce(value)
                        except Exception:  # graphql-core's path reports it
                            coerced = None
                        if coerced is not None and coerced is not Undefined:
                            results[response_name] = coerced
                            continue
                result = self.execute_field(
                    parent_type,
                    source_value,
                    details,
                    Path(path, response_name, parent_type.name),
                    position_context,
                )
                if result is not Undefined:
                    results[response_name] = result
                    if is_awaitable(result):
                        pending.append(response_name)
        except Exception:
            if pending:  # settle the other fields' awaitables: they may fail too
                self.settle_in_background([results[name] for name in pending])
            raise
        if not pending:
            return results
        return self._gather(results, pending)

    @staticmethod
    async def _gather(results: dict[str, Any], pending: list[str]) -> dict[str, Any]:
        if len(pending) == 1:
            results[pending[0]] = await results[pending[0]]
        else:
            values = await gather_with_cancel(*(results[name] for name in pending))
            results.update(zip(pending, values, strict=True))
        return results
