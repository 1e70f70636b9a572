"""The probe loop's SQL: claiming due spaces and writing probe results.

Probes use the plain claim of `db.claims`: claiming moves `next_probe_at` on, so no
replica probes a space again before then, and `schedule` sets each claimed space's
own jittered time in the same transaction. No lease is written or needed, since a probe
ends within its timeout; a replica that dies mid-probe leaves its spaces due again one
interval later.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from db.claims import WorkQueue
from db.tables import Space

LIVE = col(Space.deregistered_at).is_(None)
PROBE_QUEUE = WorkQueue(Space, col(Space.id), col(Space.next_probe_at), LIVE)


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
    error_code: str | None = None


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
        last_probe_error_code=sa.bindparam("error_code"),
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
    concurrent hold, lift or deregistration is either fully before or fully after (on
    SQLite the unit's BEGIN IMMEDIATE holds the lock already)."""
    query = sa.select(Space).where(col(Space.id).in_(space_ids))
    if session.get_bind().dialect.name != "sqlite":
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
                    "error_code": write.error_code,
                }
                for write in writes
            ],
        )
