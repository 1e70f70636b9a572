"""One rule for every argument a client sends, applied before the field runs, on every
field that takes arguments: the Mutation and Query roots, subscriptions and object fields.

A NUL byte in an input string used to reach Postgres and come back as
INTERNAL_SERVER_ERROR; on SQLite the same input was stored. Every mutation checks all
strings of its `input` (nested inputs and JSON scalars included) against
`core.common.names.text_problem`, on both databases alike: a control character or an oversized
string is INVALID on the field at fault, and nothing is written. Any other field's
arguments (a search text, a cursor, a region) get a top-level BAD_USER_INPUT naming the
argument.

IDs are not text: an id that cannot exist names nothing, and reads as any unknown one
(NOT_FOUND, null, or nothing matched by a filter). So that no lookup, filter or list of
ids can hand the database a character it cannot take (a NUL filtered on `cloudAccountIds`
failed on Postgres), every ID value, however deep in the arguments, goes through
`core.common.ids.harmless` first. `build.assert_every_argument_guarded` checks at import that no
field with arguments was left out.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Iterator
from typing import Any

import strawberry
from graphql import GraphQLSchema
from strawberry.extensions import FieldExtension
from strawberry.schema.name_converter import NameConverter
from strawberry.types.base import StrawberryList, StrawberryOptional, get_object_definition
from strawberry.types.field import StrawberryField

from core.common.errors import ApiError, UserError
from core.common.ids import harmless
from core.common.names import text_errors
from schema.common.payloads import user_errors

Path = tuple[str, ...]
NAMES = NameConverter()


def strings_in(value: Any, path: Path) -> Iterator[tuple[Path, str]]:
    """Every string of an input value with its path, IDs left out; JSON keys count too."""
    definition = get_object_definition(type(value))
    if definition is not None:
        for field in definition.fields:
            if _is_id(field.type):
                continue
            name = NAMES.get_graphql_name(field)
            yield from strings_in(getattr(value, field.python_name), (*path, name))
    elif isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, inner in value.items():
            yield path, str(key)
            yield from strings_in(inner, (*path, str(key)))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            yield from strings_in(inner, (*path, str(index)))


def _is_id(annotation: object) -> bool:
    """An ID, an optional one, or a list of them."""
    while isinstance(annotation, StrawberryOptional | StrawberryList):
        annotation = annotation.of_type
    return annotation is strawberry.ID


def _harmless_ids(value: Any) -> Any:
    """`value` (an ID, a list of them) with each id made harmless."""
    if isinstance(value, str):
        return strawberry.ID(harmless(value))
    if isinstance(value, list):
        return [_harmless_ids(item) for item in value]
    return value


def with_harmless_ids(value: Any, annotation: object) -> Any:
    """An argument's value with every ID in it made harmless; input objects are the call's
    own (converted for this call), so they are changed in place."""
    if _is_id(annotation):
        return _harmless_ids(value)
    definition = get_object_definition(type(value))
    if definition is not None:
        for field in definition.fields:
            inner = getattr(value, field.python_name)
            setattr(value, field.python_name, with_harmless_ids(inner, field.type))
    elif isinstance(value, list):
        return [with_harmless_ids(item, annotation) for item in value]
    return value


def _texts(field: StrawberryField, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The arguments that are not IDs (whose own fields may be), by their GraphQL names."""
    named = {
        argument.python_name: NAMES.from_argument(argument)
        for argument in field.arguments
        if not _is_id(argument.type)
    }
    return {named[name]: value for name, value in kwargs.items() if name in named}


def _harmless_arguments(field: StrawberryField, kwargs: dict[str, Any]) -> dict[str, Any]:
    types = {argument.python_name: argument.type for argument in field.arguments}
    return {
        name: value if name not in types else with_harmless_ids(value, types[name])
        for name, value in kwargs.items()
    }


async def _resolved(result: Any) -> Any:
    """A resolver's answer; a subscription's async generator is handed over as it is."""
    return await result if inspect.isawaitable(result) else result


class InputText(FieldExtension):
    """Answers the mutation's payload with INVALID userErrors when any input string breaks
    the text rule; otherwise runs the mutation with its ids made harmless."""

    def apply(self, field: StrawberryField) -> None:
        self.field = field

    async def resolve_async(self, next_: Any, source: Any, info: Any, **kwargs: Any) -> Any:
        errors = argument_errors(_texts(self.field, kwargs))
        if not errors:
            return await next_(source, info, **_harmless_arguments(self.field, kwargs))
        payload: Any = self.field.type
        definition = get_object_definition(payload, strict=True)
        empty = {field.python_name: None for field in definition.fields}
        return payload(**{**empty, "user_errors": user_errors(errors)})


def argument_errors(kwargs: dict[str, Any]) -> list[UserError]:
    return text_errors(
        pair for name, value in kwargs.items() for pair in strings_in(value, (name,))
    )


class ArgumentText(FieldExtension):
    """The same rule for the arguments of any other field: a top-level BAD_USER_INPUT
    naming the argument, before the field resolves; its ids are made harmless."""

    def apply(self, field: StrawberryField) -> None:
        self.field = field

    def resolve(self, next_: Any, source: Any, info: Any, **kwargs: Any) -> Any:
        return next_(source, info, **self.checked(kwargs))

    async def resolve_async(self, next_: Any, source: Any, info: Any, **kwargs: Any) -> Any:
        return await _resolved(next_(source, info, **self.checked(kwargs)))

    def checked(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        refuse_bad_text(_texts(self.field, kwargs))
        return _harmless_arguments(self.field, kwargs)


def refuse_bad_text(kwargs: dict[str, Any]) -> None:
    errors = argument_errors(kwargs)
    if errors:
        named = "; ".join(f"{'.'.join(e.field or ())}: {e.message}" for e in errors)
        raise ApiError("BAD_USER_INPUT", named)


def guard_fields(mutation: type, others: Iterable[type]) -> None:
    """Puts InputText on every mutation, and ArgumentText on every field with arguments of
    the other types (the Query and Subscription roots, object types)."""
    for field in get_object_definition(mutation, strict=True).fields:
        field.extensions.append(InputText())
    for kind in others:
        for field in get_object_definition(kind, strict=True).fields:
            if field.arguments:
                field.extensions.append(ArgumentText())


def unguarded_fields(schema: GraphQLSchema) -> list[str]:
    """`Type.field` for every field that takes arguments but has neither guard."""
    missing = []
    for name, kind in schema.type_map.items():
        for field_name, field in (getattr(kind, "fields", None) or {}).items():
            definition = (field.extensions or {}).get("strawberry-definition")
            if not getattr(field, "args", None) or not isinstance(definition, StrawberryField):
                continue
            if not any(isinstance(e, InputText | ArgumentText) for e in definition.extensions):
                missing.append(f"{name}.{field_name}")
    return missing
