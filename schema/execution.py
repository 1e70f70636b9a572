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

from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from enum import Enum
from typing import Any
from weakref import WeakKeyDictionary

from graphql import (
    FieldNode,
    GraphQLEnumType,
    GraphQLField,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLOutputType,
    GraphQLSchema,
    Undefined,
    is_leaf_type,
)
from graphql.execution.collect_fields import FieldDetailsList, GroupedFieldSet
from graphql.execution.executor import to_nodes
from graphql.execution.values import get_argument_values
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


def prepared_key(field_name: str, arguments: dict[str, Any]) -> Hashable:
    """Where an object's `prepared` answers keep a field's value: by its GraphQL name, and
    with arguments, by those as graphql-core coerces them (schema.lookahead reads them so)."""
    return (field_name, tuple(sorted(arguments.items()))) if arguments else field_name


@dataclass(frozen=True, slots=True)
class FieldPlan:
    """One field of a selection set: read in place (`leaf`), looked up in the object's
    prepared answers (`preparable`), or resolved the usual way (neither)."""

    response_name: str
    details: FieldDetailsList
    field: GraphQLField | None
    leaf: PlainLeaf | None
    preparable: bool


def _takes_prepared(parent_type: GraphQLObjectType) -> bool:
    definition = (parent_type.extensions or {}).get(GraphQLCoreConverter.DEFINITION_BACKREF)
    origin = getattr(definition, "origin", None)
    return origin is not None and PREPARED in getattr(origin, "__dataclass_fields__", {})


# The attribute of a type whose objects may carry answers read ahead for some fields.
PREPARED = "prepared"

# Per schema: each (type, field)'s PlainLeaf or None, worked out on first use.
_leaves: WeakKeyDictionary[GraphQLSchema, dict[tuple[str, str], PlainLeaf | None]] = (
    WeakKeyDictionary()
)


class Executor(StrawberryGraphQLCoreExecutionContext):
    """Strawberry's executor with planned selection sets (see the module's docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # By the grouped field set's id, with the set itself: held, its id is not reused.
        self._plans: dict[int, tuple[GroupedFieldSet, list[FieldPlan]]] = {}
        # A field node's prepared-answer key: its arguments are fixed for the operation.
        self._keys: dict[int, tuple[FieldNode, Hashable]] = {}

    def _plan(
        self, parent_type: GraphQLObjectType, grouped_field_set: GroupedFieldSet
    ) -> list[FieldPlan]:
        cached = self._plans.get(id(grouped_field_set))
        if cached is not None and cached[0] is grouped_field_set:
            return cached[1]
        leaves = _leaves.setdefault(self.schema, {})
        preparable = _takes_prepared(parent_type)
        plan = []
        for response_name, details in grouped_field_set.items():
            name = details[0].node.name.value
            field = parent_type.fields.get(name)
            if (parent_type.name, name) not in leaves:
                leaves[parent_type.name, name] = None if field is None else plain_leaf(field)
            leaf = leaves[parent_type.name, name]
            plan.append(
                FieldPlan(response_name, details, field, leaf, preparable and field is not None)
            )
        self._plans[id(grouped_field_set)] = (grouped_field_set, plan)
        return plan

    def _prepared_key(self, field: GraphQLField, details: FieldDetailsList) -> Hashable:
        node = details[0].node
        cached = self._keys.get(id(node))
        if cached is not None and cached[0] is node:
            return cached[1]
        arguments = get_argument_values(
            field,
            node,
            self.variable_values,
            details[0].fragment_variable_values,
            self.hide_suggestions,
        )
        key = prepared_key(node.name.value, arguments)
        self._keys[id(node)] = (node, key)
        return key

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
            for field in self._plan(parent_type, grouped_field_set):
                name = field.response_name
                leaf = field.leaf
                if leaf is not None:
                    value = getattr(source_value, leaf.attribute, _MISSING)
                    if value is None and leaf.nullable:
                        results[name] = None
                        continue
                    if value is not None and value is not _MISSING:
                        try:
                            coerced = leaf.coerce(value)
                        except Exception:  # graphql-core's path reports it
                            coerced = None
                        if coerced is not None and coerced is not Undefined:
                            results[name] = coerced
                            continue
                field_path = Path(path, name, parent_type.name)
                result: Any = _MISSING
                if field.preparable:
                    answers = getattr(source_value, PREPARED, None)
                    if answers:
                        assert field.field is not None
                        value = answers.get(
                            self._prepared_key(field.field, field.details), _MISSING
                        )
                        if value is not _MISSING:
                            result = self._complete_prepared(
                                parent_type, field, field_path, value, position_context
                            )
                if result is _MISSING:
                    result = self.execute_field(
                        parent_type, source_value, field.details, field_path, position_context
                    )
                if result is not Undefined:
                    results[name] = result
                    if is_awaitable(result):
                        pending.append(name)
        except Exception:
            if pending:  # settle the other fields' awaitables: they may fail too
                self.settle_in_background([results[name] for name in pending])
            raise
        if not pending:
            return results
        return self._gather(results, pending)

    def _complete_prepared(
        self,
        parent_type: GraphQLObjectType,
        field: FieldPlan,
        path: Path,
        value: Any,
        position_context: Any,
    ) -> AwaitableOrValue[Any]:
        """What execute_field does once its resolver has returned `value`."""
        assert field.field is not None
        return_type = field.field.type
        info = self.build_resolve_info(field.field, to_nodes(field.details), parent_type, path)
        try:
            completed = self.complete_value(
                return_type, field.details, info, path, value, position_context
            )
        except Exception as raw_error:
            self.handle_field_error(raw_error, return_type, field.details, path)
            return None
        if self.is_awaitable(completed):
            return self._await_completed(completed, return_type, field.details, path)
        return completed

    async def _await_completed(
        self,
        completed: Awaitable[Any],
        return_type: GraphQLOutputType,
        details: FieldDetailsList,
        path: Path,
    ) -> Any:
        try:
            return await completed
        except Exception as raw_error:
            self.handle_field_error(raw_error, return_type, details, path)
            return None

    @staticmethod
    async def _gather(results: dict[str, Any], pending: list[str]) -> dict[str, Any]:
        if len(pending) == 1:
            results[pending[0]] = await results[pending[0]]
        else:
            values = await gather_with_cancel(*(results[name] for name in pending))
            results.update(zip(pending, values, strict=True))
        return results
