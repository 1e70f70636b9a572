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
from typing import NamedTuple

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from db.claims import WorkQueue, claim_due_columns
from db.tables import Space

# Core statements on the table, returning only the columns a probe needs: an ORM row per
# claimed space and per result cost more CPU than the rest of the loop's own work.
SPACES = Space.__table__  # type: ignore[attr-defined]
LIVE = SPACES.c.deregistered_at.is_(None)
PROBE_QUEUE = WorkQueue(Space, SPACES.c.id, SPACES.c.next_probe_at, LIVE)


class ProbeTarget(NamedTuple):
    """What probing a claimed space needs: its id, owner and what its credential is
    made of."""

    id: str
    org_id: str
    provider: str
    cloud_account_id: str | None
    config_json: str
    secret_ciphertext: str | None


class ResultLock(NamedTuple):
    """What writing a result needs of a live space, read under lock."""

    id: str
    org_id: str
    held: bool
    probe_status: str
    consecutive_failures: int


TARGET_COLUMNS = [SPACES.c[name] for name in ProbeTarget._fields]
LOCK_COLUMNS = [SPACES.c[name] for name in ResultLock._fields]


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


async def claim(
    session: AsyncSession, *, now: datetime, due_again: datetime, limit: int
) -> list[ProbeTarget]:
    """Up to `limit` live spaces due by `now`, taken for probing until `due_again`."""
    rows = await claim_due_columns(
        session, PROBE_QUEUE, TARGET_COLUMNS, now=now, due_again=due_again, limit=limit
    )
    return [ProbeTarget._make(row) for row in rows]


async def schedule(session: AsyncSession, next_probe_at: Mapping[str, datetime]) -> None:
    """Each claimed space's own next probe time (the jittered interval), in one statement."""
    if next_probe_at:
        await session.execute(
            SCHEDULE, [{"space_id": space_id, "at": at} for space_id, at in next_probe_at.items()]
        )


async def earliest_due(session: AsyncSession) -> datetime | None:
    """When the next live space falls due (indexed: ix_spaces_probe_due)."""
    query = sa.select(sa.func.min(SPACES.c.next_probe_at)).where(LIVE)
    earliest: datetime | None = (await session.execute(query)).scalar_one_or_none()
    return earliest


async def lock_for_results(session: AsyncSession, space_ids: Sequence[str]) -> list[ResultLock]:
    """The live ones of these spaces, about to take probe results, locked until commit,
    so a concurrent hold, lift or deregistration is either fully before or fully after
    (on SQLite the unit's BEGIN IMMEDIATE holds the lock already). A space missing from
    the answer was deregistered (or deleted) meanwhile."""
    query = sa.select(*LOCK_COLUMNS).where(SPACES.c.id.in_(space_ids), LIVE)
    if session.get_bind().dialect.name != "sqlite":
        query = query.with_for_update()
    rows = await session.execute(query.order_by(SPACES.c.id))
    return [ResultLock._make(row) for row in rows]


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
