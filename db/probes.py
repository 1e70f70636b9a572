"""The probe loop's SQL: claiming due spaces through the `next_probe_at` lease, and
writing probe results.

A claim moves `next_probe_at` past the probe's own duration in the same
statement that picks the rows, so no other loop (another replica, on
Postgres with `FOR UPDATE SKIP LOCKED`; another process, on SQLite where the
UPDATE takes the database write lock) claims the same space again within an
interval.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from db.tables import Space

LIVE = col(Space.deregistered_at).is_(None)


@dataclass(frozen=True)
class ProbeWrite:
    """The probe columns of one space after a result."""

    space_id: str
    probe_status: str
    consecutive_failures: int
    at: datetime
    ok: bool
    version: str | None
    latency_ms: float | None
    error: str | None


def _is_sqlite(session: AsyncSession) -> bool:
    return session.get_bind().dialect.name == "sqlite"


async def claim_due(
    session: AsyncSession, now: datetime, lease_until: datetime, limit: int
) -> Sequence[Space]:
    """Live spaces due by `now`, oldest first, at most `limit`, leased until `lease_until`."""
    due = (
        sa.select(col(Space.id))
        .where(LIVE, col(Space.next_probe_at) <= now)
        .order_by(col(Space.next_probe_at))
        .limit(limit)
    )
    if not _is_sqlite(session):
        due = due.with_for_update(skip_locked=True)
    claim = (
        sa.update(Space)
        .where(col(Space.id).in_(due.scalar_subquery()))
        .values(next_probe_at=lease_until)
        .returning(Space)
        .execution_options(synchronize_session=False)
    )
    return (await session.scalars(claim)).all()


# Core executemany statements: the ORM's bulk UPDATE costs several times more CPU per row.
SPACES = Space.__table__  # type: ignore[attr-defined]
SCHEDULE = (
    sa.update(SPACES)
    .where(SPACES.c.id == sa.bindparam("space_id"))
    .values(next_probe_at=sa.bindparam("at"))
)
RESULT = (
    sa.update(SPACES)
    .where(SPACES.c.id == sa.bindparam("space_id"))
    .values(
        probe_status=sa.bindparam("status"),
        consecutive_failures=sa.bindparam("failures"),
        last_probe_at=sa.bindparam("at"),
        last_probe_ok=sa.bindparam("ok"),
        last_probe_version=sa.bindparam("version"),
        last_probe_latency_ms=sa.bindparam("latency_ms"),
        last_probe_error=sa.bindparam("error"),
    )
)


async def schedule(session: AsyncSession, next_probe_at: Mapping[str, datetime]) -> None:
    """Each claimed space's own next probe time (the jittered interval), in one statement."""
    if next_probe_at:
        await session.execute(
            SCHEDULE, [{"space_id": space_id, "at": at} for space_id, at in next_probe_at.items()]
        )


async def earliest_due(session: AsyncSession) -> datetime | None:
    """When the next live space falls due (indexed: ix_spaces_probe_due)."""
    query = sa.select(sa.func.min(Space.next_probe_at)).where(LIVE)
    earliest: datetime | None = (await session.execute(query)).scalar_one_or_none()
    return earliest


async def lock_for_results(session: AsyncSession, space_ids: Sequence[str]) -> Sequence[Space]:
    """The current rows of spaces about to take probe results, locked until commit, so a
    concurrent hold, lift or deregistration is either fully before or fully after.

    On SQLite the driver defers BEGIN to the first write, which would leave the read
    outside the transaction; an empty UPDATE first takes the write lock."""
    if _is_sqlite(session):
        await session.execute(sa.update(Space).where(sa.false()).values(held=Space.held))
    query = sa.select(Space).where(col(Space.id).in_(space_ids))
    if not _is_sqlite(session):
        query = query.with_for_update()
    query = query.order_by(col(Space.id)).execution_options(populate_existing=True)
    return (await session.scalars(query)).all()


async def write_results(session: AsyncSession, writes: Sequence[ProbeWrite]) -> None:
    """Every result of a step in one executemany UPDATE."""
    if writes:
        await session.execute(
            RESULT,
            [
                {
                    "space_id": write.space_id,
                    "status": write.probe_status,
                    "failures": write.consecutive_failures,
                    "at": write.at,
                    "ok": write.ok,
                    "version": write.version,
                    "latency_ms": write.latency_ms,
                    "error": write.error,
                }
                for write in writes
            ],
        )
