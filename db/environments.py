"""Environments: a name bound to a space and a namespace."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from db.pages import Page, page
from db.tables import Environment


async def add(session: AsyncSession, environment: Environment) -> None:
    session.add(environment)
    await session.flush()


async def environments_by_ids(
    session: AsyncSession, org_id: str, ids: Sequence[str]
) -> Sequence[Environment]:
    query = sa.select(Environment).where(
        col(Environment.org_id) == org_id, col(Environment.id).in_(ids)
    )
    return (await session.scalars(query)).all()


async def environment_by_name(session: AsyncSession, org_id: str, name: str) -> Environment | None:
    query = sa.select(Environment).where(
        col(Environment.org_id) == org_id, col(Environment.name) == name
    )
    return (await session.scalars(query)).first()


async def list_environments(
    session: AsyncSession, org_id: str, first: int, after: str | None
) -> Page[Environment]:
    query = sa.select(Environment).where(col(Environment.org_id) == org_id)
    return await page(session, query, Environment.id, first, after)


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
