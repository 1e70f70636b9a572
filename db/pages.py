"""Keyset pagination in both directions, under any order.

A page starts after (or, read backwards, before) a position: the sort key's value and
the id of the row the client saw last. Ids are time-ordered and unique, so ordering by
(sort key, id) is total: ties never lose or repeat a row across pages. Without a sort
key the id alone is the keyset.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, TypeVar

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

    @property
    def reads_from(self) -> ReadsFrom:
        return ReadsFrom(self.position is not None, self.backward)


class ReadsFrom(NamedTuple):
    """Where a page starts and which way it reads: what shapes its statement (the
    position's values are bound parameters)."""

    positioned: bool
    backward: bool


@dataclass(frozen=True)
class Order:
    """The list's order: `key` then id, both ascending or both descending."""

    key: sa.ColumnElement[Any] | None = None
    descending: bool = False


def substring_pattern(text: str) -> str:
    """A LIKE pattern for `text` anywhere (with ILIKE: in any case), its wildcards escaped
    with a backslash (`escape="\\"`)."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


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
    """One page of `query` and, when it is needed, the total count (see `read_page`)."""
    statements = PageStatements.of(query, id_column, order, keyset.reads_from)
    return await read_page(session, statements, {}, keyset, record)


# The bound parameters of a page statement: the position's sort key value and id, and
# how many rows to read.
AFTER_KEY, AFTER_ID, ROWS = "page_after_key", "page_after_id", "page_rows"


@dataclass(frozen=True)
class PageStatements:
    """The statements that read one page of a list and count the list. They depend on
    the query, the order and which way the page reads, never on the position or size
    (bound parameters), so a caller may build them once and keep them: SQLAlchemy then
    neither rebuilds them nor works out their cache key again."""

    page: sa.Select[Any]
    count: sa.Select[Any]
    # Whether each row ends with its sort key value (for the cursors).
    keyed: bool

    @classmethod
    def of(
        cls, query: sa.Select[Any], id_column: Any, order: Order, reads_from: ReadsFrom
    ) -> PageStatements:
        columns: list[Any] = [id_column] if order.key is None else [order.key, id_column]
        count = sa.select(sa.func.count()).select_from(query.subquery())
        # Reading backwards under a descending order is reading ascending, and so on.
        ascending = order.descending == reads_from.backward
        if reads_from.positioned:
            bound = [sa.bindparam(AFTER_ID, type_=id_column.type)]
            if order.key is not None:
                bound.insert(0, sa.bindparam(AFTER_KEY, type_=order.key.type))
            row, mark = sa.tuple_(*columns), sa.tuple_(*bound)
            query = query.where(row > mark if ascending else row < mark)
        if order.key is not None:
            query = query.add_columns(order.key)
        query = query.order_by(*(c.asc() if ascending else c.desc() for c in columns))
        return cls(query.limit(sa.bindparam(ROWS)), count, order.key is not None)


async def read_page(
    session: AsyncSession,
    statements: PageStatements,
    parameters: dict[str, Any],
    keyset: Keyset,
    record: Callable[[Sequence[Any]], Any] | None = None,
) -> Page[Any]:
    """One page (size+1 rows, to know whether more follow) plus the total count, with the
    query's own `parameters`. Each item is the row's first column (an ORM object), or with
    `record`, what it makes of the row's columns. A first page that holds the whole list
    is its own count (one statement); otherwise the list is counted in a second."""
    bound = {**parameters, ROWS: keyset.size + 1}
    if keyset.position is not None:
        bound[AFTER_KEY], bound[AFTER_ID] = keyset.position
    fetched = (await session.execute(statements.page, bound)).all()
    more = len(fetched) > keyset.size
    if keyset.position is None and not more:
        total: int | None = len(fetched)
    else:
        total = await session.scalar(statements.count, parameters)
    rows = list(fetched[: keyset.size])
    if keyset.backward:
        rows.reverse()
    started = keyset.position is not None
    return Page(
        items=[row[0] for row in rows] if record is None else [record(row) for row in rows],
        has_next=started if keyset.backward else more,
        has_previous=more if keyset.backward else started,
        total=total or 0,
        keys=[row[-1] for row in rows] if statements.keyed else (),
    )


async def pages_by_parent(
    session: AsyncSession,
    model: Any,
    parent_column: Any,
    parent_ids: Sequence[str],
    first: int,
    after: str | None,
    *conditions: sa.ColumnElement[bool],
    newest_first: bool = False,
) -> dict[str, Page[Any]]:
    """One page of children for each parent, in two queries whatever the number of parents;
    in id order, or with `newest_first` the other way (ids are time-ordered)."""
    base = [parent_column.in_(parent_ids), *conditions]
    counts: dict[str, int] = dict(
        (
            await session.execute(
                sa.select(parent_column, sa.func.count()).where(*base).group_by(parent_column)
            )
        ).all()
    )
    if after is not None:
        base.append(model.id < after if newest_first else model.id > after)
    in_order = model.id.desc() if newest_first else model.id
    rank = sa.func.row_number().over(partition_by=parent_column, order_by=in_order).label("rank")
    ranked = sa.select(model, rank).where(*base).subquery()
    child = sa.orm.aliased(model, ranked)
    listed = ranked.c.id.desc() if newest_first else ranked.c.id
    query = sa.select(child).where(ranked.c.rank <= first + 1).order_by(listed)
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
