"""Roles and API tokens: who may manage them, and their reads and writes."""

from __future__ import annotations

from collections.abc import Sequence

from core.access import roles, tokens
from core.common.rbac import Role
from db import orgs as org_rows
from db.access_tables import ApiToken
from db.pages import Page
from resolvers.common.context import Context
from resolvers.common.mutations import Outcome, run
from resolvers.common.pagination import window


async def list_roles(context: Context) -> list[roles.RoleView]:
    context.caller.require_to_read(roles.MANAGE)
    async with context.services.unit() as unit:
        return await roles.roles(unit, context.caller)


async def role_of_token(context: Context, row: ApiToken) -> roles.RoleView:
    if row.custom_role_id is None:
        return roles.system_view(Role(row.role))
    custom = await context.loaders.custom_role.load(row.custom_role_id)
    assert custom is not None, "a role in use by a token is never deleted"
    return roles.view_of(custom)


async def tokens_page(
    context: Context, first: int | None, after: str | None, include_revoked: bool
) -> Page[ApiToken]:
    context.caller.require_to_read(tokens.MANAGE)
    first, after = window(first, after, "ApiToken")
    async with context.services.read() as session:
        return await org_rows.tokens_page(
            session, context.caller.org_id, include_revoked, first, after
        )


async def create_role(
    context: Context, name: str, policies: Sequence[str]
) -> Outcome[roles.RoleView]:
    return await run(context, lambda unit, viewer: roles.create(unit, viewer, name, policies))


async def update_role(
    context: Context, role_id: str, policies: Sequence[str]
) -> Outcome[roles.RoleView]:
    return await run(context, lambda unit, viewer: roles.update(unit, viewer, role_id, policies))


async def delete_role(context: Context, role_id: str) -> Outcome[str]:
    return await run(context, lambda unit, viewer: roles.delete(unit, viewer, role_id))


async def create_token(
    context: Context, name: str, role: str, expires_in_days: int | None
) -> Outcome[tokens.Minted]:
    return await run(
        context, lambda unit, viewer: tokens.create(unit, viewer, name, role, expires_in_days)
    )


async def revoke_token(context: Context, token_id: str) -> Outcome[ApiToken]:
    return await run(context, lambda unit, viewer: tokens.revoke(unit, viewer, token_id))
