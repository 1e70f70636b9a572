"""Payloads of the space, namespace and environment mutations."""

from __future__ import annotations

import strawberry

from schema.common.payloads import UserError
from schema.spaces.types import Environment, Namespace, Space


@strawberry.type(description="The result of a mutation: the object, or userErrors.")
class SpacePayload:
    space: Space | None = strawberry.field(
        description="The space as the call left it; null with userErrors."
    )
    user_errors: list[UserError] = strawberry.field(
        description="Every problem with the call; empty when it succeeded."
    )


@strawberry.type(description="The result of a mutation: the object, or userErrors.")
class NamespacePayload:
    namespace: Namespace | None = strawberry.field(
        description="The namespace created; null with userErrors."
    )
    user_errors: list[UserError] = strawberry.field(
        description="Every problem with the call; empty when it succeeded."
    )


@strawberry.type(description="The result of a mutation: the object, or userErrors.")
class EnvironmentPayload:
    environment: Environment | None = strawberry.field(
        description="The environment created or bound; null with userErrors."
    )
    user_errors: list[UserError] = strawberry.field(
        description="Every problem with the call; empty when it succeeded."
    )
