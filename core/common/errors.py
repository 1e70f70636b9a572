"""The two ways the domain says no.

`UserErrors` aborts a mutation: the transaction rolls back and the payload
lists every problem with the input path at fault. `ApiError` is a top-level
GraphQL error with an `extensions.code` (FORBIDDEN on a field, BAD_USER_INPUT,
PROVIDER_ERROR).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

UserErrorCode = Literal[
    "INVALID",
    "NOT_FOUND",
    "CONFLICT",
    "FORBIDDEN",
    "PRECONDITION_FAILED",
    "QUOTA_EXCEEDED",
    "PROVIDER_ERROR",
]


@dataclass(frozen=True)
class UserError:
    field: tuple[str, ...] | None
    message: str
    code: UserErrorCode = "INVALID"


class UserErrors(Exception):
    def __init__(self, errors: Sequence[UserError]) -> None:
        super().__init__("; ".join(e.message for e in errors))
        self.errors = list(errors)

    @classmethod
    def one(
        cls, field: Sequence[str] | None, message: str, code: UserErrorCode = "INVALID"
    ) -> UserErrors:
        return cls([UserError(tuple(field) if field is not None else None, message, code)])


class Problems:
    """Collects every validation error of one call so they are returned together."""

    def __init__(self, *root: str) -> None:
        self.root = root
        self.errors: list[UserError] = []

    def add(
        self, field: Sequence[str] | None, message: str, code: UserErrorCode = "INVALID"
    ) -> None:
        path = None if field is None else (*self.root, *field)
        self.errors.append(UserError(path, message, code))

    def __bool__(self) -> bool:
        return bool(self.errors)

    def raise_if_any(self) -> None:
        if self.errors:
            raise UserErrors(self.errors)


class ApiError(Exception):
    """`details` join `code` in the error's `extensions` (plain JSON values)."""

    def __init__(self, code: str, message: str, details: dict[str, object] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details or {}


class Skipped(ApiError):
    """Some of the ids a subscription follows name nothing the caller may see: they are
    reported once (NOT_FOUND, the ids in `extensions`) and skipped, and the subscription
    goes on with the others."""


class Unauthenticated(Exception):
    """A missing or refused credential (HTTP 401, WebSocket 4403); the message says what was
    wrong and is safe to show the caller: it never repeats the credential."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
