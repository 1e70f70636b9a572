"""What every mutation payload shares: userErrors, the payload of an outcome, and the
payload of a deletion."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import strawberry

from core.common import errors
from schema.common.enums import (
    UserErrorCode,
)


@strawberry.type(
    description="An expected failure of a mutation; a payload with userErrors changed nothing."
)
class UserError:
    field: list[str] | None = strawberry.field(
        description='Path to the input field at fault, e.g. ["input", "config", "resourceGroup"]; '
        "null when no single field is at fault."
    )
    message: str = strawberry.field(description="What is wrong and what to do, for people.")
    code: UserErrorCode = strawberry.field(description="What kind of failure, for programs.")


def user_errors(found: list[errors.UserError]) -> list[UserError]:
    return [
        UserError(
            field=None if e.field is None else list(e.field),
            message=e.message,
            code=UserErrorCode(e.code),
        )
        for e in found
    ]


@strawberry.type(description="The result of a mutation: the object, or userErrors.")
class DeletePayload:
    deleted_id: strawberry.ID | None = strawberry.field(
        description="The id of what was deleted; null with userErrors."
    )
    user_errors: list[UserError] = strawberry.field(
        description="Every problem with the call; empty when it succeeded."
    )


P = TypeVar("P")


R = TypeVar("R")


def payload(
    kind: type[P],
    field: str,
    outcome: tuple[R | None, list[errors.UserError]],
    wrap: Callable[[R], Any],
) -> P:
    """The payload for an outcome: the wrapped object on success, the userErrors otherwise."""
    value, problems = outcome
    return kind(
        **{field: None if value is None else wrap(value), "user_errors": user_errors(problems)}
    )
