"""Migrations build exactly the tables the code declares, on SQLite and Postgres, and
replicas starting together on one Postgres database do not race."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlmodel import SQLModel

import db.tables  # noqa: F401  (registers the tables)
from db.engine import Database
from tests.conftest import POSTGRES_URL
from tests.support.server import Backend


def _differences(connection: sa.Connection) -> list[object]:
    context = MigrationContext.configure(connection, opts={"compare_type": True})
    return list(compare_metadata(context, SQLModel.metadata))


async def test_migrations_build_what_the_models_declare(empty_backend: Backend) -> None:
    database = Database(empty_backend.url)
    try:
        await database.migrate()
        await database.migrate()  # a restart migrates again: a no-op
        async with database.engine.connect() as connection:
            assert await connection.run_sync(_differences) == []
            revision = await connection.scalar(sa.text("SELECT version_num FROM alembic_version"))
        assert revision is not None
    finally:
        await database.dispose()


@pytest.fixture
def empty_postgres() -> Iterator[Backend]:
    if POSTGRES_URL is None:
        pytest.skip("needs SPACEDOCK_TEST_DATABASE_URL (Postgres)")
    made = Backend.postgres(POSTGRES_URL)
    yield made
    made.dispose(POSTGRES_URL)


async def test_replicas_starting_together_migrate_once(empty_postgres: Backend) -> None:
    replicas = [Database(empty_postgres.url) for _ in range(4)]
    try:
        await asyncio.gather(*(replica.migrate() for replica in replicas))
        async with replicas[0].engine.connect() as connection:
            assert await connection.run_sync(_differences) == []
            versions = await connection.scalar(sa.text("SELECT count(*) FROM alembic_version"))
        assert versions == 1
    finally:
        for replica in replicas:
            await replica.dispose()
