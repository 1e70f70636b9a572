"""Claiming due work for a background loop, so that replicas sharing a database never
take the same row at once.

A claim picks the rows whose due time has come, oldest first, and in the same
statement moves their due time to `due_again`. On Postgres the pick is
`FOR UPDATE SKIP LOCKED`, so concurrent claimers take disjoint rows; on SQLite the
UPDATE holds the database write lock. Once the claiming transaction commits, the rows
are simply not due until `due_again`: that is the whole claim for work that ends well
within an interval (probes). No row is worked on twice before `due_again`, and the
rows of a replica that dies mid-work fall due again at `due_again`, for any replica.

Work that can run longer than an interval (the CloudSpace reconciler) needs a lease
that others can see: with `claimed_by` and `lease_until` columns in its `WorkQueue`,
a claim also writes the owner and the lease's expiry, rows leased to anyone stay
unclaimable until the lease expires (a dead owner's lease simply runs out), and
`release` ends a lease when the work is done.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

Row = TypeVar("Row")


@dataclass(frozen=True)
class WorkQueue(Generic[Row]):
    """Where a loop's work lives: an ORM model, its id and due-time columns, which rows
    count at all, and (for work longer than an interval) the lease's owner and expiry."""

    model: type[Row]
    id: Any  # the model's id column
    due: Any  # when a row next wants work
    live: sa.ColumnElement[bool] | None = None
    claimed_by: Any = None  # the lease's owner column, when the queue has leases
    lease_until: Any = None  # the lease's expiry column


async def claim_due(
    session: AsyncSession,
    queue: WorkQueue[Row],
    *,
    now: datetime,
    due_again: datetime,
    limit: int,
    owner: str | None = None,
    lease_until: datetime | None = None,
) -> Sequence[Row]:
    """Up to `limit` rows due by `now`, oldest first, taken by this transaction; their
    due time becomes `due_again`. Queues with a lease also skip rows leased beyond
    `now`, and take `owner` and `lease_until` (both required for them)."""
    claim = _claim(session, queue, queue.model, now, due_again, limit, owner, lease_until)
    returning = claim.returning(queue.model).execution_options(synchronize_session=False)
    return (await session.scalars(returning)).all()


async def claim_due_columns(
    session: AsyncSession,
    queue: WorkQueue[Row],
    columns: Sequence[sa.ColumnElement[Any]],
    *,
    now: datetime,
    due_again: datetime,
    limit: int,
) -> Sequence[sa.Row[Any]]:
    """As `claim_due` (queues without a lease), returning only `columns` as Core rows:
    no ORM object is built per claimed row. With the queue's columns taken from its
    Table (not the ORM class), the whole statement stays Core."""
    table = sa.inspect(queue.model).local_table  # type: ignore[union-attr]
    claim = _claim(session, queue, table, now, due_again, limit, None, None)
    return (await session.execute(claim.returning(*columns))).all()


def _claim(
    session: AsyncSession,
    queue: WorkQueue[Row],
    target: Any,  # the ORM class, or its Table for a Core statement
    now: datetime,
    due_again: datetime,
    limit: int,
    owner: str | None,
    lease_until: datetime | None,
) -> sa.Update:
    leased = queue.claimed_by is not None
    if leased != (owner is not None and lease_until is not None):
        raise ValueError("owner and lease_until go with queues that have claimed_by/lease_until")
    due = sa.select(queue.id).where(queue.due <= now).order_by(queue.due).limit(limit)
    if queue.live is not None:
        due = due.where(queue.live)
    if leased:
        due = due.where(sa.or_(queue.lease_until.is_(None), queue.lease_until <= now))
    if session.get_bind().dialect.name != "sqlite":
        due = due.with_for_update(skip_locked=True)
    values: dict[Any, Any] = {queue.due: due_again}
    if leased:
        values |= {queue.claimed_by: owner, queue.lease_until: lease_until}
    return sa.update(target).where(queue.id.in_(due.scalar_subquery())).values(values)


async def release(
    session: AsyncSession, queue: WorkQueue[Row], ids: Sequence[Any], owner: str
) -> None:
    """Ends `owner`'s leases on `ids`; a lease that passed to another owner is left alone."""
    if ids:
        await session.execute(
            sa.update(queue.model)
            .where(queue.id.in_(ids), queue.claimed_by == owner)
            .values({queue.claimed_by: None, queue.lease_until: None})
            .execution_options(synchronize_session=False)
        )
