"""Cloud accounts and their per-cluster grants."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from db.pages import Page, page
from db.tables import CloudAccount, ClusterGrant, Space


async def add(session: AsyncSession, row: CloudAccount | ClusterGrant) -> None:
    session.add(row)
    await session.flush()


async def accounts_by_ids(
    session: AsyncSession, org_id: str, ids: Sequence[str]
) -> Sequence[CloudAccount]:
    query = sa.select(CloudAccount).where(
        col(CloudAccount.org_id) == org_id, col(CloudAccount.id).in_(ids)
    )
    return (await session.scalars(query)).all()


async def account_by_name(session: AsyncSession, org_id: str, name: str) -> CloudAccount | None:
    query = sa.select(CloudAccount).where(
        col(CloudAccount.org_id) == org_id, col(CloudAccount.name) == name
    )
    return (await session.scalars(query)).first()


async def list_accounts(
    session: AsyncSession, org_id: str, first: int, after: str | None
) -> Page[CloudAccount]:
    query = sa.select(CloudAccount).where(col(CloudAccount.org_id) == org_id)
    return await page(session, query, CloudAccount.id, first, after)


async def delete_account(session: AsyncSession, account: CloudAccount) -> None:
    await session.delete(account)
    await session.flush()


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


async def delete_grant(session: AsyncSession, grant: ClusterGrant) -> None:
    await session.delete(grant)
    await session.flush()
