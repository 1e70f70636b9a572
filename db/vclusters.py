"""vClusters' SQL (db.vcluster_tables): a CloudSpace's vClusters, lookups by name, and the
reconciler's fenced writes.

The reconciler reads a CloudSpace's vClusters, runs their steps outside any transaction,
then writes each one's outcome only if it is still at the step it read (`advance`): a
removeVCluster in between, which moved it to its removal, is never overwritten.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from db.vcluster_tables import VCluster


async def of_cloud_space(session: AsyncSession, cloud_space_id: str) -> Sequence[VCluster]:
    """Its vClusters, oldest first (the first is the one named like it, at creation)."""
    return await of_cloud_spaces(session, [cloud_space_id])


async def of_cloud_spaces(
    session: AsyncSession, cloud_space_ids: Sequence[str]
) -> Sequence[VCluster]:
    query = (
        sa.select(VCluster)
        .where(col(VCluster.cloud_space_id).in_(cloud_space_ids))
        .order_by(col(VCluster.created_at), col(VCluster.id))
    )
    return (await session.scalars(query)).all()


async def by_name(session: AsyncSession, cloud_space_id: str, name: str) -> VCluster | None:
    query = sa.select(VCluster).where(
        col(VCluster.cloud_space_id) == cloud_space_id, col(VCluster.name) == name
    )
    return (await session.scalars(query)).first()


async def add(session: AsyncSession, row: VCluster) -> None:
    session.add(row)
    await session.flush()


async def advance(session: AsyncSession, vcluster_id: str, read_step: str, **values: Any) -> bool:
    """Writes `values` if the vCluster is still at `read_step`; False when it moved on (or
    is gone)."""
    result = await session.execute(
        sa.update(VCluster)
        .where(col(VCluster.id) == vcluster_id, col(VCluster.step) == read_step)
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


async def set_phase_of_all(session: AsyncSession, cloud_space_id: str, phase: str) -> None:
    """Every vCluster of the CloudSpace to `phase` (DELETING with it)."""
    await session.execute(
        sa.update(VCluster)
        .where(col(VCluster.cloud_space_id) == cloud_space_id)
        .values(phase=phase, message=None)
        .execution_options(synchronize_session=False)
    )


async def delete(session: AsyncSession, vcluster_id: str) -> None:
    await session.execute(sa.delete(VCluster).where(col(VCluster.id) == vcluster_id))


async def delete_at(session: AsyncSession, vcluster_id: str, read_step: str) -> bool:
    """Deletes the vCluster if it is still at `read_step`; False otherwise."""
    result = await session.execute(
        sa.delete(VCluster)
        .where(col(VCluster.id) == vcluster_id, col(VCluster.step) == read_step)
        .execution_options(synchronize_session=False)
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]
