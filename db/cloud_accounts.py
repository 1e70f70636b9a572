"""Cloud accounts and their per-cluster grants."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from db.tables import ClusterGrant, Space


async def live_spaces_using(session: AsyncSession, account_id: str) -> int:
    query = sa.select(sa.func.count()).where(
        col(Space.cloud_account_id) == account_id, col(Space.deregistered_at).is_(None)
    )
    return (await session.scalar(query)) or 0


async def grant(session: AsyncSession, account_id: str, cluster_key: str) -> ClusterGrant | None:
    query = sa.select(ClusterGrant).where(
        col(ClusterGrant.cloud_account_id) == account_id,
        col(ClusterGrant.cluster_key) == cluster_key,
    )
    return (await session.scalars(query)).first()


async def grants_of_accounts(
    session: AsyncSession, account_ids: Sequence[str]
) -> Sequence[ClusterGrant]:
    query = (
        sa.select(ClusterGrant)
        .where(col(ClusterGrant.cloud_account_id).in_(account_ids))
        .order_by(ClusterGrant.id)
    )
    return (await session.scalars(query)).all()


async def live_spaces_of_account(session: AsyncSession, account_id: str) -> Sequence[Space]:
    """The registered (not deregistered) spaces that use the account."""
    query = sa.select(Space).where(
        col(Space.cloud_account_id) == account_id, col(Space.deregistered_at).is_(None)
    )
    return (await session.scalars(query)).all()
