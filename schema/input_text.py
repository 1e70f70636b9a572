"""One rule for every string a client sends as an argument, applied before the field runs.

A NUL byte in any input string used to reach Postgres and come back as
INTERNAL_SERVER_ERROR; on SQLite the same input was stored. Every mutation now checks
all strings of its `input` (nested inputs and JSON scalars included) against
`core.names.text_problem`, on both databases alike: a control character or an
oversized string is INVALID on the field at fault, and nothing is written. A query
field's arguments (a search text on Postgres failed the same way) get a top-level
BAD_USER_INPUT. IDs are left to the lookups: an id that cannot exist is NOT_FOUND (null
on reads), like any unknown one.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import strawberry
from strawberry.extensions import FieldExtension
from strawberry.schema.name_converter import NameConverter
from strawberry.types.base import StrawberryList, StrawberryOptional, get_object_definition
from strawberry.types.field import StrawberryField

from core.errors import ApiError, UserError
from core.names import text_errors
from schema.payloads import user_errors

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


class InputText(FieldExtension):
    """Answers the mutation's payload with INVALID userErrors when any input string breaks
    the text rule; otherwise runs the mutation."""

    def apply(self, field: StrawberryField) -> None:
        self.field = field

    async def resolve_async(self, next_: Any, source: Any, info: Any, **kwargs: Any) -> Any:
        errors = argument_errors(kwargs)
        if not errors:
            return await next_(source, info, **kwargs)
        payload: Any = self.field.type
        definition = get_object_definition(payload, strict=True)
        empty = {field.python_name: None for field in definition.fields}
        return payload(**{**empty, "user_errors": user_errors(errors)})


def argument_errors(kwargs: dict[str, Any]) -> list[UserError]:
    return text_errors(
        pair for name, value in kwargs.items() for pair in strings_in(value, (name,))
    )


class ArgumentText(FieldExtension):
    """The same rule for the arguments of a query field (a search text, a cursor): a
    top-level BAD_USER_INPUT naming the argument, before the field resolves."""

    def apply(self, field: StrawberryField) -> None:
        self.texts = {
            argument.python_name for argument in field.arguments if not _is_id(argument.type)
        }

    def resolve(self, next_: Any, source: Any, info: Any, **kwargs: Any) -> Any:
        self.refuse_bad_arguments(kwargs)
        return next_(source, info, **kwargs)

    async def resolve_async(self, next_: Any, source: Any, info: Any, **kwargs: Any) -> Any:
        self.refuse_bad_arguments(kwargs)
        return await next_(source, info, **kwargs)

    def refuse_bad_arguments(self, kwargs: dict[str, Any]) -> None:
        refuse_bad_text({name: value for name, value in kwargs.items() if name in self.texts})


def refuse_bad_text(kwargs: dict[str, Any]) -> None:
    errors = argument_errors(kwargs)
    if errors:
        named = "; ".join(f"{'.'.join(e.field or ())}: {e.message}" for e in errors)
        raise ApiError("BAD_USER_INPUT", named)


def guard_roots(mutation: type, query: type) -> None:
    """Puts InputText on every mutation, and ArgumentText on every query field with
    arguments."""
    for field in get_object_definition(mutation, strict=True).fields:
        field.extensions.append(InputText())
    for field in get_object_definition(query, strict=True).fields:
        if field.arguments:
            field.extensions.append(ArgumentText())
