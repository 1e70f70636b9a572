"""The access part of the Mutation root: custom roles and API tokens."""

from __future__ import annotations

from typing import Annotated

import strawberry

from resolvers.access import roles_tokens as access
from schema.access.inputs import (
    ApiTokenPayload,
    CreateApiTokenInput,
    CreateApiTokenPayload,
    CreateRoleInput,
    DeleteRoleInput,
    RevokeApiTokenInput,
    RolePayload,
    UpdateRoleInput,
)
from schema.access.types import ApiToken, RoleDefinition
from schema.common.info import GraphInfo
from schema.common.payloads import DeletePayload, payload, user_errors
from schema.engine.arguments import INPUT


@strawberry.type
class AccessMutation:
    @strawberry.mutation(
        description="Creates a custom role: a named set of policies, each one the caller holds "
        "itself (FORBIDDEN otherwise). Needs role:manage."
    )
    async def create_role(
        self, info: GraphInfo, input: Annotated[CreateRoleInput, INPUT]
    ) -> RolePayload:
        outcome = await access.create_role(info.context, input.name, input.policies)
        return payload(RolePayload, "role", outcome, RoleDefinition.from_domain)

    @strawberry.mutation(
        description="Replaces a custom role's policies; tokens holding it get them at once. "
        "Only a role within the caller's own policies, and only with policies the caller holds "
        "(FORBIDDEN otherwise). Needs role:manage."
    )
    async def update_role(
        self, info: GraphInfo, input: Annotated[UpdateRoleInput, INPUT]
    ) -> RolePayload:
        outcome = await access.update_role(info.context, input.id, input.policies)
        return payload(RolePayload, "role", outcome, RoleDefinition.from_domain)

    @strawberry.mutation(
        description="Deletes a custom role within the caller's own policies (FORBIDDEN "
        "otherwise); PRECONDITION_FAILED while a token that is not revoked holds it. Needs "
        "role:manage."
    )
    async def delete_role(
        self, info: GraphInfo, input: Annotated[DeleteRoleInput, INPUT]
    ) -> DeletePayload:
        outcome = await access.delete_role(info.context, input.id)
        return payload(DeletePayload, "deleted_id", outcome, strawberry.ID)

    @strawberry.mutation(
        description="Creates an API token of the caller's org, of a role within the caller's "
        "own policies (FORBIDDEN otherwise); its secret is in this payload only. Needs "
        "token:manage."
    )
    async def create_api_token(
        self, info: GraphInfo, input: Annotated[CreateApiTokenInput, INPUT]
    ) -> CreateApiTokenPayload:
        minted, problems = await access.create_token(
            info.context, input.name, input.role, input.expires_in_days
        )
        if minted is None:
            return CreateApiTokenPayload(
                api_token=None, token=None, user_errors=user_errors(problems)
            )
        return CreateApiTokenPayload(
            api_token=ApiToken.from_row(minted.row), token=minted.secret, user_errors=[]
        )

    @strawberry.mutation(
        description="Revokes an API token: it is refused at once, and its open WebSockets "
        "close within seconds. Revoking twice is harmless. Only a token of a role within the "
        "caller's own policies (FORBIDDEN otherwise). Needs token:manage."
    )
    async def revoke_api_token(
        self, info: GraphInfo, input: Annotated[RevokeApiTokenInput, INPUT]
    ) -> ApiTokenPayload:
        outcome = await access.revoke_token(info.context, input.id)
        return payload(ApiTokenPayload, "api_token", outcome, ApiToken.from_row)
