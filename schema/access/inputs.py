"""Inputs and payloads of the access mutations: custom roles and API tokens."""

from __future__ import annotations

import strawberry

from schema.access.types import ApiToken, RoleDefinition
from schema.common.payloads import UserError


@strawberry.input(description="A new custom role of the caller's org.")
class CreateRoleInput:
    name: str = strawberry.field(
        description="1 to 64 of A-Z, a-z, 0-9, single spaces and . _ : / @ -, starting and "
        "ending with a letter or digit; unique in the org ignoring case (TOKMGR and tokmgr are "
        "one name) and not a system role's name. Stored NFKC-normalised."
    )
    policies: list[str] = strawberry.field(
        description="The policies it grants (see Viewer.permissions), each one the caller "
        "holds (FORBIDDEN otherwise); an unknown one is INVALID."
    )


@strawberry.input(description="New policies for a custom role; system roles cannot be changed.")
class UpdateRoleInput:
    id: strawberry.ID = strawberry.field(description="The custom role's id.")
    policies: list[str] = strawberry.field(
        description="The policies it grants from now on; they replace the old ones."
    )


@strawberry.input(description="The custom role to delete; PRECONDITION_FAILED while tokens use it.")
class DeleteRoleInput:
    id: strawberry.ID = strawberry.field(description="The custom role's id.")


@strawberry.type(description="The role as the call left it, or userErrors and nothing changed.")
class RolePayload:
    role: RoleDefinition | None = strawberry.field(description="Null when userErrors is not empty.")
    user_errors: list[UserError] = strawberry.field(
        description="Every problem with the call; empty when it succeeded."
    )


@strawberry.input(description="A new API token of the caller's org.")
class CreateApiTokenInput:
    name: str = strawberry.field(description="What the token is for: 1 to 100 characters.")
    role: str = strawberry.field(
        description="A system role's name (ADMIN, EDITOR, VIEWER) or a custom role's id."
    )
    expires_in_days: int | None = strawberry.field(
        default=None, description="Lifetime in days, 1 to 3650; null: no expiry."
    )


@strawberry.type(description="A new token with its secret, or userErrors and nothing created.")
class CreateApiTokenPayload:
    api_token: ApiToken | None = strawberry.field(
        description="The token's metadata; null when userErrors is not empty."
    )
    token: str | None = strawberry.field(
        description="The secret, shown this once: send it as Authorization: Bearer <token>."
    )
    user_errors: list[UserError] = strawberry.field(
        description="Every problem with the call; empty when it succeeded."
    )


@strawberry.input(
    description="The API token to revoke; it is refused at once, open WebSockets too."
)
class RevokeApiTokenInput:
    id: strawberry.ID = strawberry.field(description="The token's id.")


@strawberry.type(description="The token as the call left it, or userErrors and nothing changed.")
class ApiTokenPayload:
    api_token: ApiToken | None = strawberry.field(description="Null when userErrors is not empty.")
    user_errors: list[UserError] = strawberry.field(
        description="Every problem with the call; empty when it succeeded."
    )
