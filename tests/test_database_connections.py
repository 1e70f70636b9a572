"""Postgres connections (issue 12): reads run without BEGIN and COMMIT, and a pooled
connection the server dropped is replaced before use rather than failing a request,
without a ping round trip per checkout. Postgres only: SQLite has no server to lose.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg  # type: ignore[import-untyped]
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from db.engine import Database
from tests.conftest import POSTGRES_URL

pytestmark = pytest.mark.skipif(
    POSTGRES_URL is None, reason="needs SPACEDOCK_TEST_DATABASE_URL (a Postgres server)"
)
# Within a transaction both statements see one transaction id; in autocommit each its own.
TRANSACTION_ID = "SELECT txid_current()"


@pytest.fixture
async def database() -> AsyncIterator[Database]:
    assert POSTGRES_URL is not None
    made = Database(POSTGRES_URL)
    yield made
    await made.dispose()


async def terminate(pooled: asyncpg.Connection) -> None:
    """What a Postgres restart does to a pooled connection, waited for until the client
    has read the server's goodbye."""
    assert POSTGRES_URL is not None
    admin = await asyncpg.connect(POSTGRES_URL.replace("postgresql+asyncpg", "postgresql"))
    try:
        assert await admin.fetchval("SELECT pg_terminate_backend($1)", pooled.get_server_pid())
    finally:
        await admin.close()
    deadline = asyncio.get_running_loop().time() + 10
    while not pooled.is_closed():
        assert asyncio.get_running_loop().time() < deadline, "the connection was not ended"
        await asyncio.sleep(0.01)


async def transaction_ids(session: AsyncSession) -> set[int]:
    return {await session.scalar(sa.text(TRANSACTION_ID)) for _ in range(2)}


async def test_each_statement_of_a_read_is_its_own_transaction(database: Database) -> None:
    async with database.transaction(read_only=True) as session:
        assert len(await transaction_ids(session)) == 2
    async with database.transaction() as session:  # a write keeps its one transaction
        assert len(await transaction_ids(session)) == 1


async def test_a_connection_the_server_ended_is_replaced_before_a_read_uses_it(
    database: Database,
) -> None:
    async with database.transaction(read_only=True) as session:
        first = await session.scalar(sa.text("SELECT pg_backend_pid()"))
        pooled = (await (await session.connection()).get_raw_connection()).driver_connection
    await terminate(pooled)
    statements = database.statement_count
    async with database.transaction(read_only=True) as session:
        second = await session.scalar(sa.text("SELECT pg_backend_pid()"))
    assert second != first
    assert database.statement_count == statements + 1  # no ping statement, no retry
