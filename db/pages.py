"""Keyset pagination: ids are time-ordered, so the id is the cursor."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

T = TypeVar("T")


@dataclass(frozen=True)
class Page(Generic[T]):
    items: Sequence[T]
    has_next: bool
    total: int


async def page(
    session: AsyncSession,
    query: sa.Select[Any],
    id_column: Any,
    first: int,
    after: str | None,
) -> Page[Any]:
    """Runs `query` as one page (first+1 rows) plus its total count."""
    total = await session.scalar(sa.select(sa.func.count()).select_from(query.subquery()))
    window = query.order_by(id_column).limit(first + 1)
    if after is not None:
        window = window.where(id_column > after)
    rows = (await session.scalars(window)).all()
    return Page(items=rows[:first], has_next=len(rows) > first, total=total or 0)


async def pages_by_parent(
    session: AsyncSession,
    model: Any,
    parent_column: Any,
    parent_ids: Sequence[str],
    first: int,
    after: str | None,
    *conditions: sa.ColumnElement[bool],
) -> dict[str, Page[Any]]:
    """One page of children for each parent, in two queries whatever the number of parents."""
    base = [parent_column.in_(parent_ids), *conditions]
    counts: dict[str, int] = dict(
        (
            await session.execute(
                sa.select(parent_column, sa.func.count()).where(*base).group_by(parent_column)
            )
        ).all()
    )
    if after is not None:
        base.append(model.id > after)
    rank = sa.func.row_number().over(partition_by=parent_column, order_by=model.id).label("rank")
    ranked = sa.select(model, rank).where(*base).subquery()
    child = sa.orm.aliased(model, ranked)
    query = sa.select(child).where(ranked.c.rank <= first + 1).order_by(ranked.c.id)
    grouped: dict[str, list[Any]] = {parent: [] for parent in parent_ids}
    parent_key = parent_column.key
    for row in (await session.scalars(query)).all():
        grouped[getattr(row, parent_key)].append(row)
    return {
        parent: Page(items=rows[:first], has_next=len(rows) > first, total=counts.get(parent, 0))
        for parent, rows in grouped.items()
    }
