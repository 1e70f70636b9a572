"""Orgs, their custom roles, and the API tokens that authenticate their members."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from db.access_tables import ApiToken, RoleDefinition
from db.pages import Page, page
from db.tables import Org


async def org_by_name(session: AsyncSession, name: str) -> Org | None:
    return (await session.scalars(sa.select(Org).where(col(Org.name) == name))).first()


async def token_with_org(
    session: AsyncSession, token_hash: str
) -> tuple[ApiToken, Org, RoleDefinition | None] | None:
    """The token with this hash, its org and its custom role (if any), revoked or not."""
    query = (
        sa.select(ApiToken, Org, RoleDefinition)
        .join(Org, col(Org.id) == ApiToken.org_id)
        .outerjoin(RoleDefinition, col(RoleDefinition.id) == ApiToken.custom_role_id)
        .where(col(ApiToken.token_hash) == token_hash)
    )
    row = (await session.execute(query)).first()
    return None if row is None else (row[0], row[1], row[2])


async def mark_token_used(session: AsyncSession, token_id: str, now: datetime) -> None:
    query = sa.update(ApiToken).where(col(ApiToken.id) == token_id).values(last_used_at=now)
    await session.execute(query)


async def token_states(
    session: AsyncSession, token_ids: list[str]
) -> dict[str, tuple[datetime | None, datetime | None]]:
    """(revoked_at, expires_at) of each token that still exists."""
    query = sa.select(col(ApiToken.id), col(ApiToken.revoked_at), col(ApiToken.expires_at)).where(
        col(ApiToken.id).in_(token_ids)
    )
    return {row[0]: (row[1], row[2]) for row in await session.execute(query)}


async def tokens_page(
    session: AsyncSession, org_id: str, include_revoked: bool, first: int, after: str | None
) -> Page[ApiToken]:
    query = sa.select(ApiToken).where(col(ApiToken.org_id) == org_id)
    if not include_revoked:
        query = query.where(col(ApiToken.revoked_at).is_(None))
    return await page(session, query, ApiToken.id, first, after)


async def roles_of(session: AsyncSession, org_id: str) -> list[RoleDefinition]:
    query = (
        sa.select(RoleDefinition)
        .where(col(RoleDefinition.org_id) == org_id)
        .order_by(col(RoleDefinition.id))
    )
    return list((await session.scalars(query)).all())


async def role_in_use(session: AsyncSession, role_id: str) -> bool:
    """True while a token that is not revoked holds the role."""
    query = sa.select(sa.func.count()).where(
        col(ApiToken.custom_role_id) == role_id, col(ApiToken.revoked_at).is_(None)
    )
    return bool(await session.scalar(query))


async def detach_revoked_tokens(session: AsyncSession, role_id: str) -> None:
    """Revoked tokens keep no hold on a role being deleted (the foreign key restricts)."""
    query = (
        sa.update(ApiToken)
        .where(col(ApiToken.custom_role_id) == role_id, col(ApiToken.revoked_at).is_not(None))
        .values(custom_role_id=None)
    )
    await session.execute(query)


async def orgs_without_default_cloud_space(
    session: AsyncSession, except_org_id: str, limit: int
) -> list[Org]:
    """Orgs not yet given their default CloudSpace, oldest first, leaving out the
    platform's own org (`except_org_id`, the one that owns the host)."""
    query = (
        sa.select(Org)
        .where(col(Org.default_cloud_space_at).is_(None), col(Org.id) != except_org_id)
        .order_by(col(Org.created_at), col(Org.id))
        .limit(limit)
    )
    return list((await session.scalars(query)).all())


async def mark_default_cloud_space(session: AsyncSession, org_id: str, now: datetime) -> bool:
    """Marks the org as given its default CloudSpace; False when it already was. The
    conditional UPDATE is the claim: a concurrent transaction doing the same waits for
    this one's row lock (Postgres) or the write lock (SQLite), then finds it marked."""
    result = await session.execute(
        sa.update(Org)
        .where(col(Org.id) == org_id, col(Org.default_cloud_space_at).is_(None))
        .values(default_cloud_space_at=now)
        .execution_options(synchronize_session=False)
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]
