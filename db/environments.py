"""Environments: a name bound to a space and a namespace."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from db.tables import Environment


class EnvironmentRecord(NamedTuple):
    """An environment as a list read shows it: its columns in a tuple, no ORM object to
    build and track (issue 12: ORM rows were a tenth of a 100-space read's CPU)."""

    id: str
    name: str
    namespace: str
    space_id: str


async def environments_of_spaces(
    session: AsyncSession, space_ids: Sequence[str]
) -> list[EnvironmentRecord]:
    table = Environment.__table__.c  # type: ignore[attr-defined]
    query = (
        sa.select(*(table[name] for name in EnvironmentRecord._fields))
        .where(table.space_id.in_(space_ids))
        .order_by(table.id)
    )
    return [EnvironmentRecord._make(row) for row in await session.execute(query)]


async def rebind(
    session: AsyncSession, environment: Environment, space_id: str, namespace: str
) -> None:
    environment.space_id = space_id
    environment.namespace = namespace
    session.add(environment)
    await session.flush()
