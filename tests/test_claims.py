"""The claim query of `db.claims` on a real database (SQLite, and Postgres when
SPACEDOCK_TEST_DATABASE_URL is set): concurrent claimers take disjoint rows, a claim
moves the due time on, and queues with leases skip rows leased to someone else until
the lease expires or is released.

The queue here is a table of the test's own (its own metadata, so the migrations'
model stays spacedock's), with the columns a leased queue has.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from db import claims
from db.engine import Database
from tests.support.server import Backend


class Base(DeclarativeBase):
    pass


class Job(Base):
    __tablename__ = "claim_test_jobs"

    id: Mapped[str] = mapped_column(primary_key=True)
    due_at: Mapped[datetime] = mapped_column(sa.DateTime(timezone=True))
    done: Mapped[bool] = mapped_column(default=False)
    claimed_by: Mapped[str | None] = mapped_column(default=None)
    lease_until: Mapped[datetime | None] = mapped_column(sa.DateTime(timezone=True), default=None)


PLAIN = claims.WorkQueue(Job, Job.id, Job.due_at, live=sa.not_(Job.done))
LEASED = claims.WorkQueue(
    Job, Job.id, Job.due_at, claimed_by=Job.claimed_by, lease_until=Job.lease_until
)
NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
async def database(empty_backend: Backend) -> AsyncIterator[Database]:
    made = Database(empty_backend.url)
    async with made.engine.begin() as connection:
        await connection.run_sync(Base.metadata.create_all)
    yield made
    await made.dispose()


async def add_jobs(database: Database, count: int, due: datetime = NOW) -> list[str]:
    ids = [f"job-{n:03}" for n in range(count)]
    async with database.transaction() as session:
        session.add_all(Job(id=job_id, due_at=due) for job_id in ids)
    return ids


async def claim(database: Database, queue: claims.WorkQueue[Job], **options: object) -> list[str]:
    options = {"now": NOW, "due_again": NOW + timedelta(minutes=1), "limit": 100} | options
    async with database.transaction() as session:
        claimed = await claims.claim_due(session, queue, **options)  # type: ignore[arg-type]
    return sorted(job.id for job in claimed)  # RETURNING gives no order


async def test_concurrent_claimers_take_disjoint_rows_and_each_row_once(database: Database) -> None:
    ids = await add_jobs(database, 40)
    claimed = await asyncio.gather(*(claim(database, PLAIN, limit=7) for _ in range(8)))
    taken = [job for batch in claimed for job in batch]
    assert sorted(taken) == ids  # every due row once, none twice
    assert await claim(database, PLAIN) == []  # not due again before due_again


async def test_a_claim_takes_the_oldest_due_rows_and_they_fall_due_again(
    database: Database,
) -> None:
    await add_jobs(database, 3)
    async with database.transaction() as session:
        (late,) = await session.scalars(sa.select(Job).where(Job.id == "job-002"))
        late.due_at = NOW + timedelta(seconds=30)
        (finished,) = await session.scalars(sa.select(Job).where(Job.id == "job-001"))
        finished.done = True
    assert await claim(database, PLAIN, limit=1) == ["job-000"]
    assert await claim(database, PLAIN) == []  # job-001 is not live, job-002 not due
    later = NOW + timedelta(minutes=1)
    assert await claim(database, PLAIN, now=later) == ["job-000", "job-002"]


async def test_a_lease_keeps_others_off_until_it_expires_or_is_released(database: Database) -> None:
    await add_jobs(database, 2)
    lease = NOW + timedelta(minutes=10)
    # Due again soon, but leased for longer: the work runs longer than an interval.
    soon = NOW + timedelta(seconds=5)
    mine = await claim(database, LEASED, owner="a", lease_until=lease, due_again=soon, limit=1)
    assert mine == ["job-000"]
    later = NOW + timedelta(minutes=1)
    theirs = await claim(database, LEASED, owner="b", lease_until=later, now=later, due_again=later)
    assert theirs == ["job-001"]  # job-000 is due again but leased to a

    # a's lease expires (a died): b may take the row.
    expired = lease + timedelta(seconds=1)
    taken = await claim(
        database, LEASED, owner="b", lease_until=expired + timedelta(minutes=10), now=expired
    )
    assert taken == ["job-000", "job-001"]
    async with database.transaction() as session:
        await claims.release(session, LEASED, ["job-000"], owner="a")  # a's lease passed to b
        rows = await session.execute(sa.select(Job.id, Job.claimed_by))
        owners = {job_id: owner for job_id, owner in rows}
        assert owners == {"job-000": "b", "job-001": "b"}
        await claims.release(session, LEASED, ["job-000", "job-001"], owner="b")
    release_time = expired + timedelta(minutes=1)
    assert await claim(database, LEASED, owner="c", lease_until=release_time, now=release_time) == [
        "job-000",
        "job-001",
    ]


async def test_a_leased_queue_needs_an_owner_and_a_plain_one_takes_none(database: Database) -> None:
    with pytest.raises(ValueError):
        await claim(database, LEASED)
    with pytest.raises(ValueError):
        await claim(database, PLAIN, owner="a", lease_until=NOW)
