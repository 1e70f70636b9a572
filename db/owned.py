"""Queries every stored object shares: add, remove, by id, by name, and a page of an org's rows.

Every org-owned lookup filters on `org_id`, so a foreign id reads exactly like an
unknown one; `org_id=None` is for internal loops that work across orgs.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import SQLModel, col

from db.pages import Page, page

Row = TypeVar("Row", bound=SQLModel)
# Postgres text cannot hold NUL and the driver cannot encode a lone surrogate: a key with
# either names no row, on SQLite alike, and must not reach the driver, which would fail.
UNSTORABLE = re.compile(r"[\x00\ud800-\udfff]")


def storable(key: str) -> bool:
    return UNSTORABLE.search(key) is None


async def add(session: AsyncSession, row: SQLModel) -> None:
    session.add(row)
    await session.flush()


async def remove(session: AsyncSession, row: SQLModel) -> None:
    await session.delete(row)
    await session.flush()


def _owned(model: type[Row], org_id: str | None) -> sa.Select[Row]:
    query = sa.select(model)
    if org_id is not None:
        query = query.where(col(model.org_id) == org_id)  # type: ignore[attr-defined]
    return query


async def by_ids(
    session: AsyncSession, model: type[Row], org_id: str | None, ids: Sequence[str]
) -> Sequence[Row]:
    ids = [key for key in ids if storable(key)]
    if not ids:
        return []
    query = _owned(model, org_id).where(col(model.id).in_(ids))  # type: ignore[attr-defined]
    return (await session.scalars(query)).all()


async def by_id(session: AsyncSession, model: type[Row], org_id: str | None, id: str) -> Row | None:
    found = await by_ids(session, model, org_id, [id])
    return found[0] if found else None


async def by_name(session: AsyncSession, model: type[Row], org_id: str, name: str) -> Row | None:
    if not storable(name):
        return None
    query = _owned(model, org_id).where(col(model.name) == name)  # type: ignore[attr-defined]
    return (await session.scalars(query)).first()


async def by_name_key(
    session: AsyncSession, model: type[Row], org_id: str, name_key: str
) -> Row | None:
    """The org's row whose name is this one to a reader (core.common.names.name_key)."""
    if not storable(name_key):
        return None
    query = _owned(model, org_id).where(col(model.name_key) == name_key)  # type: ignore[attr-defined]
    return (await session.scalars(query)).first()


async def org_page(
    session: AsyncSession, model: type[Row], org_id: str, first: int, after: str | None
) -> Page[Any]:
    return await page(session, _owned(model, org_id), model.id, first, after)  # type: ignore[attr-defined]
