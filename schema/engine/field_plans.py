"""What the executor (schema.engine.execution) works out once per field of a selection set:
the field's kind (plain, enum, object, list of objects, anything else), how its value is
coerced, and the key a prepared answer is found under."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from graphql import (
    GraphQLBoolean,
    GraphQLEnumType,
    GraphQLField,
    GraphQLFloat,
    GraphQLInt,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLSchema,
    get_named_type,
    is_leaf_type,
)
from graphql.execution.collect_fields import FieldDetailsList
from strawberry.schema.schema_converter import GraphQLCoreConverter
from strawberry.types.field import StrawberryField

from schema.engine.input_text import ArgumentText
from schema.engine.policies import Needs

# The attribute of a type whose objects may carry answers read ahead for some fields.
PREPARED = "prepared"
# What the fast path hands type checks for the ResolveInfo it does not build.
NO_INFO: Any = None


def assert_type_checks_ignore_info(schema: GraphQLSchema) -> None:
    """The fast path calls is_type_of without a ResolveInfo: only Strawberry's own checks,
    which do not read it, may be in the schema (a type's custom is_type_of is refused)."""
    for named in schema.type_map.values():
        if isinstance(named, GraphQLObjectType):
            definition = (named.extensions or {}).get(GraphQLCoreConverter.DEFINITION_BACKREF)
            assert getattr(definition, "is_type_of", None) is None, (
                f"{named.name} has its own is_type_of; schema.engine.execution passes it no info"
            )


def prepared_key(field_name: str, arguments: dict[str, Any]) -> Hashable | None:
    """Where an object's `prepared` answers keep a field's value: by its GraphQL name, and
    with arguments, by those as graphql-core coerces them (schema.engine.lookahead reads them so).
    None for arguments that cannot be a key (lists, input objects): never prepared."""
    if not arguments:
        return field_name
    key = (field_name, tuple(sorted(arguments.items())))
    try:
        hash(key)
    except TypeError:
        return None
    return key


@dataclass(frozen=True, slots=True)
class FieldKind:
    """What the executor may skip for one field of one type, worked out once per schema."""

    # The Python attribute of a plain field; None when the field has a resolver,
    # arguments or field extensions.
    attribute: str | None
    # For a field of scalar or enum type: its coercion (for a value read in place or
    # prepared), and whether null is allowed.
    coerce: Callable[[Any], Any] | None
    nullable: bool
    # The field's object may carry a prepared answer for it: the type has `prepared` and
    # the field no extensions but view policies (and the text rule where it checks nothing).
    preparable: bool
    # The view policies (Needs) a prepared answer is served under.
    needs: tuple[Needs, ...]


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


def _origin(named_type: Any) -> Any:
    definition = (named_type.extensions or {}).get(GraphQLCoreConverter.DEFINITION_BACKREF)
    return getattr(definition, "origin", None)


# Argument types that hold no text and no id: the text rule (ArgumentText) has nothing
# to check or make harmless in them.
_TEXTLESS = (GraphQLInt, GraphQLFloat, GraphQLBoolean)


def _checks_nothing(extension: object, field: GraphQLField) -> bool:
    """The text rule on a field whose arguments are numbers, booleans or enums: a no-op."""
    return isinstance(extension, ArgumentText) and all(
        get_named_type(argument.type) in _TEXTLESS
        or isinstance(get_named_type(argument.type), GraphQLEnumType)
        for argument in field.args.values()
    )


def field_kind(parent_type: GraphQLObjectType, field: GraphQLField) -> FieldKind:
    origin = _origin(parent_type)
    definition = (field.extensions or {}).get(GraphQLCoreConverter.DEFINITION_BACKREF)
    extensions = list(getattr(definition, "extensions", None) or ())
    needs = tuple(e for e in extensions if isinstance(e, Needs))
    # statusEvents(first:) is guarded by the text rule like every field with arguments;
    # counted as an extension that blocks, it sent every page's events back through their
    # resolvers and loaders (twice the CPU of that read, bench/graphql_reads.py).
    preparable = (
        origin is not None
        and PREPARED in getattr(origin, "__dataclass_fields__", {})
        and all(isinstance(e, Needs) or _checks_nothing(e, field) for e in extensions)
    )
    plain = isinstance(definition, StrawberryField) and definition.is_basic_field
    attribute = definition.python_name if plain and not field.args else None  # type: ignore[union-attr]
    nullable = not isinstance(field.type, GraphQLNonNull)
    named = field.type.of_type if isinstance(field.type, GraphQLNonNull) else field.type
    coerce: Callable[[Any], Any] | None = None
    if isinstance(named, GraphQLEnumType):
        coerce = _enum_coercion(named)
    elif is_leaf_type(named):
        coerce = named.coerce_output_value  # type: ignore[union-attr]
    return FieldKind(attribute, coerce, nullable, preparable, needs)


@dataclass(frozen=True, slots=True)
class FieldPlan:
    """One field of a selection set, as this operation asks for it."""

    response_name: str
    details: FieldDetailsList
    field: GraphQLField | None
    kind: FieldKind | None
