"""aiosqlite with one trip to its thread per statement instead of four.

aiosqlite runs SQLite on a worker thread, and each cursor call is a trip there and back:
SQLAlchemy's adapter creates a cursor, executes, fetches and closes, four trips per
statement, each a future, a queue hand-off and a wake-up of the event loop. On a page of
spaces those trips cost more than the SQL (issue 12). This connection's cursors do all
four in one call on the thread and hand back the rows, row count and description at
once; everything else is aiosqlite's own.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import aiosqlite


class _Outcome:
    """What one statement left on its sqlite3 cursor, taken on the worker thread."""

    __slots__ = ("description", "lastrowid", "rowcount", "rows")

    def __init__(self, cursor: sqlite3.Cursor, fetch: bool) -> None:
        self.description = cursor.description
        self.rows: list[Any] = cursor.fetchall() if fetch and cursor.description else []
        self.rowcount = cursor.rowcount
        self.lastrowid = cursor.lastrowid
        cursor.close()


def _run(connection: sqlite3.Connection, sql: str, parameters: Any) -> _Outcome:
    return _Outcome(connection.execute(sql, parameters), fetch=True)


def _run_many(connection: sqlite3.Connection, sql: str, rows: Iterable[Any]) -> _Outcome:
    return _Outcome(connection.executemany(sql, rows), fetch=False)


class OneTripCursor:
    """The cursor SQLAlchemy's aiosqlite adapter drives; only execute goes to the thread."""

    arraysize = 1

    def __init__(self, connection: OneTripConnection) -> None:
        self._connection = connection
        self._outcome: _Outcome | None = None
        self._next = 0

    async def __aenter__(self) -> OneTripCursor:
        return self

    async def __aexit__(self, *_: object) -> None:
        return None

    async def execute(self, sql: str, parameters: Sequence[Any] = ()) -> OneTripCursor:
        self._outcome = await self._connection.on_thread(_run, sql, parameters)
        self._next = 0
        return self

    async def executemany(self, sql: str, rows: Iterable[Any]) -> OneTripCursor:
        self._outcome = await self._connection.on_thread(_run_many, sql, list(rows))
        self._next = 0
        return self

    async def fetchall(self) -> list[Any]:
        return self._take(None)

    async def fetchmany(self, size: int | None = None) -> list[Any]:
        return self._take(self.arraysize if size is None else size)

    async def fetchone(self) -> Any:
        taken = self._take(1)
        return taken[0] if taken else None

    def _take(self, size: int | None) -> list[Any]:
        rows = self._outcome.rows if self._outcome is not None else []
        end = len(rows) if size is None else min(len(rows), self._next + size)
        taken = rows[self._next : end]
        self._next = end
        return taken

    async def close(self) -> None:
        """Frees the rows; the row count and last row id stay readable, as on sqlite3."""
        if self._outcome is not None:
            self._outcome.rows = []

    @property
    def description(self) -> Any:
        return None if self._outcome is None else self._outcome.description

    @property
    def rowcount(self) -> int:
        return -1 if self._outcome is None else self._outcome.rowcount

    @property
    def lastrowid(self) -> int | None:
        return None if self._outcome is None else self._outcome.lastrowid


class OneTripConnection(aiosqlite.Connection):
    def cursor(self) -> OneTripCursor:  # type: ignore[override]
        return OneTripCursor(self)

    async def on_thread(
        self, function: Callable[[sqlite3.Connection, str, Any], _Outcome], sql: str, rows: Any
    ) -> _Outcome:
        """`function(the sqlite3 connection, sql, rows)` on the worker thread, through
        aiosqlite's own queue (`_execute`, which its cursors use too)."""
        outcome: _Outcome = await self._execute(  # type: ignore[no-untyped-call]
            lambda: function(self._conn, sql, rows)
        )
        return outcome


async def connect(connector: Callable[[], sqlite3.Connection]) -> OneTripConnection:
    """A started connection; its thread is a daemon, as SQLAlchemy makes aiosqlite's,
    so an unclosed connection never keeps the process alive."""
    connection = OneTripConnection(connector, iter_chunk_size=64)
    connection._thread.daemon = True
    await connection
    return connection
