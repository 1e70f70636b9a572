"""Keyset pagination in both directions, under any order.

A page starts after (or, read backwards, before) a position: the sort key's value and
the id of the row the client saw last. Ids are time-ordered and unique, so ordering by
(sort key, id) is total: ties never lose or repeat a row across pages. Without a sort
key the id alone is the keyset.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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
    has_previous: bool = False
    # The sort key's value of each item (ordered pages only), for the cursors.
    keys: Sequence[Any] = ()
    # Set by resolvers for ordered pages; otherwise a cursor is the item's id.
    cursors: Sequence[str] | None = None


@dataclass(frozen=True)
class Keyset:
    """Which rows a page holds: `size` of them after `position` in the list's order,
    or with `backward`, the `size` rows just before it (last/before)."""

    size: int
    backward: bool = False
    # (sort key value, id); the value is None when the list is ordered by id alone.
    position: tuple[Any, Any] | None = None


@dataclass(frozen=True)
class Order:
    """The list's order: `key` then id, both ascending or both descending."""

    key: sa.ColumnElement[Any] | None = None
    descending: bool = False


async def page(
    session: AsyncSession,
    query: sa.Select[Any],
    id_column: Any,
    first: int,
    after: str | None,
) -> Page[Any]:
    """`first` rows after the id `after`, in id order, plus the total count."""
    position = None if after is None else (None, after)
    return await ordered_page(session, query, id_column, Order(), Keyset(first, False, position))


async def ordered_page(
    session: AsyncSession,
    query: sa.Select[Any],
    id_column: Any,
    order: Order,
    keyset: Keyset,
    record: Callable[[Sequence[Any]], Any] | None = None,
) -> Page[Any]:
    """One page (size+1 rows, to know whether more follow) plus the total count. Each item
    is the row's first column (an ORM object), or with `record`, what it makes of the row's
    columns. A first page that holds the whole list is its own count (one statement);
    otherwise the list is counted in a second."""
    listed = query
    columns: list[Any] = [id_column] if order.key is None else [order.key, id_column]
    # Reading backwards under a descending order is reading ascending, and so on.
    ascending = order.descending == keyset.backward
    if keyset.position is not None:
        value, object_id = keyset.position
        bound = [object_id] if order.key is None else [value, object_id]
        row = sa.tuple_(*columns)
        mark = sa.tuple_(
            *(sa.literal(v, type_=c.type) for v, c in zip(bound, columns, strict=True))
        )
        query = query.where(row > mark if ascending else row < mark)
    if order.key is not None:
        query = query.add_columns(order.key)
    query = query.order_by(*(c.asc() if ascending else c.desc() for c in columns))
    fetched = (await session.execute(query.limit(keyset.size + 1))).all()
    more = len(fetched) > keyset.size
    if keyset.position is None and not more:
        total: int | None = len(fetched)
    else:
        total = await session.scalar(sa.select(sa.func.count()).select_from(listed.subquery()))
    rows = list(fetched[: keyset.size])
    if keyset.backward:
        rows.reverse()
    started = keyset.position is not None
    return Page(
        items=[row[0] for row in rows] if record is None else [record(row) for row in rows],
        has_next=started if keyset.backward else more,
        has_previous=more if keyset.backward else started,
        total=total or 0,
        keys=[row[-1] for row in rows] if order.key is not None else (),
    )


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
        parent: Page(
            items=rows[:first],
            has_next=len(rows) > first,
            total=counts.get(parent, 0),
            has_previous=after is not None,
        )
        for parent, rows in grouped.items()
    }
