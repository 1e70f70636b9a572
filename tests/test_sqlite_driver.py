"""The SQLite connection under the engine (db.sqlite_driver): one trip to aiosqlite's
thread per statement, with the same answers SQLAlchemy gets from stock aiosqlite: rows,
row counts, inserted ids, many-row inserts and errors; and stored times read back
as aware UTC."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from db.engine import Database, UniqueViolation
from db.sqlite_driver import OneTripConnection
from db.tables import UtcDateTime

CREATE = "CREATE TABLE things (id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL)"


@pytest.fixture
async def database(tmp_path: Path) -> AsyncIterator[Database]:
    made = Database(f"sqlite+aiosqlite:///{tmp_path / 'driver.db'}")
    async with made.transaction() as session:
        await session.execute(sa.text(CREATE))
    yield made
    await made.dispose()


@pytest.fixture
def trips(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The statements sent to the worker thread, one entry per trip."""
    sent: list[str] = []
    original = OneTripConnection.on_thread

    async def counted(self: OneTripConnection, function: Any, sql: str, rows: Any) -> Any:
        sent.append(sql)
        return await original(self, function, sql, rows)

    monkeypatch.setattr(OneTripConnection, "on_thread", counted)
    return sent


async def test_each_statement_is_one_trip_with_its_rows(
    database: Database, trips: list[str]
) -> None:
    async with database.transaction() as session:
        connection = await session.connection()
        inserted = await connection.execute(
            sa.text("INSERT INTO things (name) VALUES (:name)"), [{"name": "a"}, {"name": "b"}]
        )
        assert inserted.rowcount == 2
        one = await connection.execute(sa.text("INSERT INTO things (name) VALUES ('c')"))
        assert one.lastrowid == 3
    async with database.transaction(read_only=True) as session:
        rows = (await session.execute(sa.text("SELECT id, name FROM things ORDER BY id"))).all()
        assert [tuple(row) for row in rows] == [(1, "a"), (2, "b"), (3, "c")]
        result = await session.execute(sa.text("SELECT name FROM things ORDER BY id"))
        assert result.keys() == ["name"] and result.fetchone() == ("a",)
        assert result.fetchmany(5) == [("b",), ("c",)] and result.fetchone() is None
    assert trips == [
        "BEGIN IMMEDIATE",
        "INSERT INTO things (name) VALUES (?)",
        "INSERT INTO things (name) VALUES ('c')",
        "BEGIN DEFERRED",
        "SELECT id, name FROM things ORDER BY id",
        "SELECT name FROM things ORDER BY id",
    ]  # commits go to the thread as aiosqlite's own calls


async def test_a_failing_statement_raises_and_rolls_back(database: Database) -> None:
    with pytest.raises(UniqueViolation):
        async with database.transaction() as session:
            await session.execute(sa.text("INSERT INTO things (name) VALUES ('same')"))
            await session.execute(sa.text("INSERT INTO things (name) VALUES ('same')"))
    with pytest.raises(sa.exc.OperationalError, match="no such table"):
        async with database.transaction(read_only=True) as session:
            await session.execute(sa.text("SELECT * FROM missing"))
    async with database.transaction(read_only=True) as session:
        assert await session.scalar(sa.text("SELECT count(*) FROM things")) == 0


async def test_stored_times_read_back_as_aware_utc_in_every_spelling(database: Database) -> None:
    at = datetime(2026, 1, 2, 3, 4, 5, 600000, tzinfo=UTC)
    spellings = [
        "2026-01-02 03:04:05.600000",  # as SQLAlchemy writes it
        "2026-01-02T03:04:05.600000",
        "2026-01-02 05:04:05.600000+02:00",  # written elsewhere, with an offset
    ]
    read = sa.select(sa.literal_column("stamp", UtcDateTime())).select_from(
        sa.text("(SELECT :text AS stamp)")
    )
    async with database.transaction(read_only=True) as session:
        for text in spellings:
            assert await session.scalar(read, {"text": text}) == at, text
        assert await session.scalar(read, {"text": None}) is None
