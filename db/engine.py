"""The database handle: one async engine, sessions, transactions and migrations.

SQLite (aiosqlite, WAL) is the embedded default; Postgres (asyncpg) runs the
same code. Callers get one transaction per request or loop step and never
commit themselves: `Database.transaction()` commits on success and rolls back
on any exception.

On SQLite, SQLAlchemy emits BEGIN itself (the `begin` event recipe of its SQLite
dialect documentation) instead of the driver, which would defer it to the first
write and leave earlier reads outside the transaction. Transactions that may write
begin with BEGIN IMMEDIATE: they take the write lock first, so what they read stays
true until they commit (the role `FOR UPDATE` plays on Postgres), and none fails
with "database is locked" when it upgrades from reading to writing after another
writer committed. Read-only transactions (`read_only=True`) begin DEFERRED and never
wait on a writer.

On Postgres, reads run in autocommit: under READ COMMITTED each statement sees its own
snapshot even inside a transaction, so BEGIN and COMMIT would only add round trips.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy import event
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from db import sqlite_driver
from db.outages import outages

SQLITE_CONSTRAINT_UNIQUE = 2067
SQLITE_CONSTRAINT_PRIMARYKEY = 1555
POSTGRES_UNIQUE_VIOLATION = "23505"
MIGRATIONS = Path(__file__).parent / "migrations"
# Any fixed 64-bit number; replicas starting together queue on it.
MIGRATION_LOCK_ID = 0x5BACED0C
# Execution option naming how a SQLite transaction begins: DEFERRED or IMMEDIATE.
SQLITE_BEGIN = "spacedock_sqlite_begin"


class UniqueViolation(Exception):
    """A write lost a race: a row it checked was absent was inserted concurrently.

    The transaction has been rolled back whole. Retrying it lets the domain's own checks
    see the other row and answer as they would have (CONFLICT, or an idempotent result).
    Savepoints would not do: on SQLite a savepoint taken before the first write commits
    on release, so a later rollback would keep the row.
    """


def _is_unique_violation(error: sa.exc.IntegrityError) -> bool:
    cause = error.orig
    if getattr(cause, "sqlstate", None) == POSTGRES_UNIQUE_VIOLATION:
        return True
    code = getattr(cause, "sqlite_errorcode", None)
    return code in (SQLITE_CONSTRAINT_UNIQUE, SQLITE_CONSTRAINT_PRIMARYKEY)


class Database:
    def __init__(
        self, url: str, pool_size: int = 10, max_overflow: int = 20, pool_timeout_s: float = 30
    ) -> None:
        self.url = sa.make_url(url)
        self.is_sqlite = self.url.get_backend_name() == "sqlite"
        options: dict[str, Any] = {
            "pool_size": pool_size,
            "max_overflow": max_overflow,
            "pool_timeout": pool_timeout_s,
        }
        if self.is_sqlite:
            options["async_creator"] = self._connect_sqlite
        self.engine: AsyncEngine = create_async_engine(self.url, **options)
        self.statement_count = 0  # SQL statements executed; exported as a metric
        event.listen(self.engine.sync_engine, "before_cursor_execute", self._count_statement)
        # Only a statement that ran says the database is reachable (a token held in memory
        # lets a request through without it).
        event.listen(self.engine.sync_engine, "after_cursor_execute", _reached)
        if self.is_sqlite:
            event.listen(self.engine.sync_engine, "connect", _sqlite_connect)
            event.listen(self.engine.sync_engine, "begin", _sqlite_begin)
        else:
            event.listen(self.engine.sync_engine, "checkout", _drop_if_lost)
            event.listen(self.engine.sync_engine, "checkin", _note_checkin)
        # SQLite's BEGIN holds one snapshot for a whole read; Postgres reads autocommit.
        reading = (
            self.engine
            if self.is_sqlite
            else self.engine.execution_options(isolation_level="AUTOCOMMIT")
        )
        self._reading_sessions = async_sessionmaker(reading, expire_on_commit=False)
        self._writing_sessions = async_sessionmaker(
            self.engine, expire_on_commit=False, execution_options={SQLITE_BEGIN: "IMMEDIATE"}
        )

    def _connect_sqlite(self) -> Awaitable[sqlite_driver.OneTripConnection]:
        arguments, options = self.engine.dialect.create_connect_args(self.url)
        options = {**options, "timeout": 30}  # seconds a writer waits for the write lock
        return sqlite_driver.connect(partial(sqlite3.connect, *arguments, **options))

    def _count_statement(self, *_: Any) -> None:
        self.statement_count += 1

    @asynccontextmanager
    async def transaction(self, read_only: bool = False) -> AsyncIterator[AsyncSession]:
        """One transaction; on SQLite it takes the write lock at BEGIN unless `read_only`."""
        sessions = self._reading_sessions if read_only else self._writing_sessions
        try:
            async with sessions() as session, session.begin():
                yield session
        except sa.exc.IntegrityError as error:
            if _is_unique_violation(error):
                raise UniqueViolation(str(error.orig)) from error
            raise

    async def ping(self) -> None:
        async with self.engine.connect() as conn:
            await conn.execute(sa.text("SELECT 1"))

    async def migrate(self) -> None:
        """Brings the schema to the newest revision; safe for replicas starting together."""
        async with self.engine.connect() as conn:
            if not self.is_sqlite:
                await conn.execute(sa.text(f"SELECT pg_advisory_lock({MIGRATION_LOCK_ID})"))
            try:
                await conn.run_sync(_upgrade)
                await conn.commit()
            finally:
                if not self.is_sqlite:
                    await conn.execute(sa.text(f"SELECT pg_advisory_unlock({MIGRATION_LOCK_ID})"))
                    await conn.commit()

    async def dispose(self) -> None:
        await self.engine.dispose()


def alembic_config(connection: sa.Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


def _upgrade(connection: sa.Connection) -> None:
    command.upgrade(alembic_config(connection), "head")


def _sqlite_connect(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()
    dbapi_connection.isolation_level = None  # the driver emits no BEGIN; _sqlite_begin does


def _sqlite_begin(connection: sa.Connection) -> None:
    mode = connection.get_execution_options().get(SQLITE_BEGIN, "DEFERRED")
    connection.exec_driver_sql(f"BEGIN {mode}")


# A pooled Postgres connection idle this long is pinged before use: something between
# may have dropped it without a word. One in use more recently is only checked for the
# server's goodbye, which asyncpg has already read (a restart or a cut connection),
# instead of a round trip per checkout (0.3 ms; pool_pre_ping's way).
PING_AFTER_IDLE_S = 10.0
_CHECKED_IN_AT = "spacedock_checked_in_at"


def _note_checkin(_dbapi_connection: Any, record: Any) -> None:
    if record is not None:
        record.info[_CHECKED_IN_AT] = time.monotonic()


def _drop_if_lost(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
    """A lost connection raises DisconnectionError: the pool drops it and checks out
    (or opens) another."""
    if record.driver_connection.is_closed():
        raise sa.exc.DisconnectionError("the database closed this connection")
    idle_since = record.info.get(_CHECKED_IN_AT)
    if idle_since is not None and time.monotonic() - idle_since > PING_AFTER_IDLE_S:
        try:
            dbapi_connection.ping()
        except Exception as error:
            raise sa.exc.DisconnectionError("a pooled connection no longer answers") from error


def _reached(*_: Any) -> None:
    outages.reached()
