"""Environments: a name bound to a space and a namespace."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from db.tables import Environment


async def environments_of_spaces(
    session: AsyncSession, space_ids: Sequence[str]
) -> Sequence[Environment]:
    query = (
        sa.select(Environment)
        .where(col(Environment.space_id).in_(space_ids))
        .order_by(Environment.id)
    )
    return (await session.scalars(query)).all()


async def rebind(
    session: AsyncSession, environment: Environment, space_id: str, namespace: str
) -> None:
    environment.space_id = space_id
    environment.namespace = namespace
    session.add(environment)
    await session.flush()
