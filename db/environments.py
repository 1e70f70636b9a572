"""Environments: a name bound to a space and a namespace."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from db.records import ENVIRONMENT_READ, EnvironmentRecord
from db.tables import Environment

_TABLE = Environment.__table__.c  # type: ignore[attr-defined]
# Built once: building a statement costs more than running it (issue 12).
_OF_SPACES = (
    sa.select(*ENVIRONMENT_READ.columns)
    .where(_TABLE.space_id.in_(sa.bindparam("space_ids", expanding=True)))
    .order_by(_TABLE.id)
)


async def environments_of_spaces(
    session: AsyncSession, space_ids: Sequence[str]
) -> list[EnvironmentRecord]:
    rows = await session.execute(_OF_SPACES, {"space_ids": list(space_ids)})
    return [EnvironmentRecord._make(row) for row in rows]


async def rebind(
    session: AsyncSession, environment: Environment, space_id: str, namespace: str
) -> None:
    environment.space_id = space_id
    environment.namespace = namespace
    session.add(environment)
    await session.flush()
