"""Object types of access: the org, the caller, roles and API tokens."""

from __future__ import annotations

from datetime import datetime

import strawberry
from strawberry import Private

from core.access import roles as role_rules
from db import access_tables, tables
from resolvers.access import roles_tokens as access_reads
from schema.common.enums import (
    CredentialKind,
    Role,
)
from schema.common.info import GraphInfo
from schema.common.relay import Node
from schema.engine.policies import needs


@strawberry.type(description="An organisation: it owns every object its members see.")
class Org(Node):
    id: strawberry.ID = strawberry.field(description="The org's id.")
    name: str = strawberry.field(description="Unique across the installation.")

    @classmethod
    def from_row(cls, row: tables.Org) -> Org:
        return cls(id=strawberry.ID(row.id), name=row.name)


@strawberry.type(description="The authenticated caller.")
class Viewer:
    org: Org = strawberry.field(description="The org the caller belongs to.")
    role: Role = strawberry.field(description="The caller's role in that org.")
    custom_role: RoleDefinition | None = strawberry.field(description="Set when role is CUSTOM.")
    subject: str = strawberry.field(description="The API token's name or the OIDC subject.")
    credential_kind: CredentialKind = strawberry.field(description="How the caller authenticated.")
    permissions: list[str] = strawberry.field(
        description="Policies such as space:view, space:create, space:update, space:delete."
    )


@strawberry.type(
    description="A named set of policies. The three system roles are listed too and cannot "
    "be changed."
)
class RoleDefinition(Node):
    id: strawberry.ID = strawberry.field(
        description="A system role's id is its name (ADMIN, EDITOR, VIEWER)."
    )
    name: str = strawberry.field(description="Unique in the org; system role names are reserved.")
    system: bool = strawberry.field(description="True for ADMIN, EDITOR and VIEWER.")
    policies: list[str] = strawberry.field(description="The policies the role grants.")

    @classmethod
    def from_row(cls, row: access_tables.RoleDefinition) -> RoleDefinition:
        return cls.from_domain(role_rules.view_of(row))

    @classmethod
    def from_domain(cls, role: role_rules.RoleView) -> RoleDefinition:
        return cls(
            id=strawberry.ID(role.id),
            name=role.name,
            system=role.system,
            policies=list(role.policies),
        )


@strawberry.type(
    description="An API token's metadata; the secret is shown once, by createApiToken."
)
class ApiToken(Node):
    row: Private[access_tables.ApiToken]
    id: strawberry.ID = strawberry.field(description="The token's id (revokeApiToken takes it).")
    name: str = strawberry.field(description="What the token is for, as its creator named it.")
    created_at: datetime = strawberry.field(description="When the token was created.")
    expires_at: datetime | None = strawberry.field(
        description="When the token stops working; null: never."
    )
    last_used_at: datetime | None = strawberry.field(
        description="When the token was last used, to the minute (written at most once a minute)."
    )
    revoked_at: datetime | None = strawberry.field(
        description="When the token was revoked; null while it is not."
    )

    @classmethod
    def from_row(cls, row: access_tables.ApiToken) -> ApiToken:
        return cls(
            row=row,
            id=strawberry.ID(row.id),
            name=row.name,
            created_at=row.created_at,
            expires_at=row.expires_at,
            last_used_at=row.last_used_at,
            revoked_at=row.revoked_at,
        )

    @strawberry.field(description="The role the token grants.", extensions=needs("token:manage"))
    async def role(self, info: GraphInfo) -> RoleDefinition:
        return RoleDefinition.from_domain(await access_reads.role_of_token(info.context, self.row))
