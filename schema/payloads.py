"""Mutation payloads: the changed object, or userErrors and nothing changed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import strawberry

from core import errors
from schema.types import CloudAccount, CloudSpace, ClusterAccess, Environment, Namespace, Space


@strawberry.type
class UserError:
    field: list[str] | None = strawberry.field(
        description='Path to the input field at fault, e.g. ["input", "config", "resourceGroup"].'
    )
    message: str
    code: str = strawberry.field(
        description=(
            "One of INVALID, NOT_FOUND, CONFLICT, FORBIDDEN, PRECONDITION_FAILED, "
            "QUOTA_EXCEEDED, PROVIDER_ERROR."
        )
    )


def user_errors(found: list[errors.UserError]) -> list[UserError]:
    return [
        UserError(field=None if e.field is None else list(e.field), message=e.message, code=e.code)
        for e in found
    ]


@strawberry.type
class CloudAccountPayload:
    cloud_account: CloudAccount | None
    user_errors: list[UserError]


@strawberry.type
class DeletePayload:
    deleted_id: strawberry.ID | None
    user_errors: list[UserError]


@strawberry.type
class ClusterAccessPayload:
    cluster_access: ClusterAccess | None
    user_errors: list[UserError]


@strawberry.type
class SpacePayload:
    space: Space | None
    user_errors: list[UserError]


@strawberry.type
class NamespacePayload:
    namespace: Namespace | None
    user_errors: list[UserError]


@strawberry.type
class EnvironmentPayload:
    environment: Environment | None
    user_errors: list[UserError]


@strawberry.type(description="The CloudSpace as changed, or userErrors and nothing changed.")
class CloudSpacePayload:
    cloud_space: CloudSpace | None = strawberry.field(
        description="Null when userErrors is not empty."
    )
    user_errors: list[UserError] = strawberry.field(description="Why nothing changed.")


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
