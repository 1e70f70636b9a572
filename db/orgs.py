"""Orgs and the API tokens that authenticate their members."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from db.tables import ApiToken, Org


async def org_by_name(session: AsyncSession, name: str) -> Org | None:
    return (await session.scalars(sa.select(Org).where(col(Org.name) == name))).first()


async def token_with_org(session: AsyncSession, token_hash: str) -> tuple[ApiToken, Org] | None:
    query = (
        sa.select(ApiToken, Org)
        .join(Org, col(Org.id) == ApiToken.org_id)
        .where(col(ApiToken.token_hash) == token_hash)
    )
    row = (await session.execute(query)).first()
    return None if row is None else (row[0], row[1])
