"""Migrations build exactly the tables the code declares, on SQLite and Postgres, and
replicas starting together on one Postgres database do not race; a migration that
rewrites data rewrites it as the code now computes it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlmodel import SQLModel, col

# Every module of tables, each registering its own on SQLModel.metadata.
import db.access_tables
import db.admission_tables
import db.advisor_tables
import db.app_tables
import db.cloudspace_tables
import db.tables
import db.vcluster_tables  # noqa: F401
from db.engine import Database, alembic_config
from db.tables import Org, Space
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


async def test_generic_identity_keys_keep_the_path_case_and_read_localhost_as_loopback(
    empty_backend: Backend,
) -> None:
    """Issue 18 (0008): keys were the server URL in lower case, so /DUP conflicted with
    /dup, and localhost was not 127.0.0.1. Where two live spaces now share a key, the
    first registered keeps it and the other stays registered under a key of its own."""
    database = Database(empty_backend.url)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    spaces = {  # id: (server, live), in the order they were registered
        "spc_a": ("https://localhost:6443/c", True),
        "spc_b": ("https://127.0.0.1:6443/c", True),
        "spc_c": ("https://127.0.0.1:6443/DUP", True),
        "spc_d": ("https://localhost/gone", False),
        "spc_e": ("https://kube.example/Team", True),
    }
    try:
        async with database.engine.connect() as connection:
            await connection.run_sync(lambda sync: command.upgrade(alembic_config(sync), "0007"))
            await connection.execute(sa.insert(Org).values(id="org_1", name="o", created_at=start))
            for order, (space_id, (server, live)) in enumerate(spaces.items()):
                await connection.execute(
                    sa.insert(Space).values(
                        id=space_id,
                        org_id="org_1",
                        name=space_id,
                        provider="GENERIC",
                        space_type="KUBERNETES",
                        config_json=json.dumps({"server": server}),
                        identity_key=f"GENERIC/{server.lower()}",
                        next_probe_at=start,
                        created_at=start + timedelta(minutes=order),
                        deregistered_at=None if live else start,
                    )
                )
            await connection.commit()
        await database.migrate()
        async with database.engine.connect() as connection:
            found = await connection.execute(sa.text("SELECT id, identity_key FROM spaces"))
            keys = {space_id: key for space_id, key in found.all()}
        assert keys == {
            "spc_a": "GENERIC/https://127.0.0.1:6443/c",
            "spc_b": "GENERIC/duplicate/spc_b",
            "spc_c": "GENERIC/https://127.0.0.1:6443/DUP",
            "spc_d": "GENERIC/https://127.0.0.1/gone",
            "spc_e": "GENERIC/https://kube.example/Team",
        }
    finally:
        await database.dispose()


async def test_names_that_already_collide_survive_the_name_key_migration(
    empty_backend: Backend,
) -> None:
    """Rows written before names had one canonical form may differ only in case; the
    migration keeps them all (the oldest holding the key), and never fails on them."""
    from alembic import command

    from db.engine import alembic_config

    database = Database(empty_backend.url)
    now = datetime(2026, 1, 1)  # as UtcDateTime stores times: naive, in UTC

    def legacy(connection: sa.Connection) -> None:
        command.upgrade(alembic_config(connection), "0007")
        tables = sa.MetaData()
        table = {
            name: sa.Table(name, tables, autoload_with=connection)
            for name in ("orgs", "role_definitions", "cloud_accounts", "spaces")
        }
        connection.execute(
            table["orgs"].insert(), [{"id": "org_1", "name": "one", "created_at": now}]
        )
        roles = [("role_1", "TOKMGR"), ("role_2", "tokmgr"), ("role_3", "other")]
        connection.execute(
            table["role_definitions"].insert(),
            [
                {
                    "id": i,
                    "org_id": "org_1",
                    "name": n,
                    "policies_json": "[]",
                    "created_at": now + timedelta(seconds=k),
                }
                for k, (i, n) in enumerate(roles)
            ],
        )
        connection.execute(
            table["cloud_accounts"].insert(),
            [
                {
                    "id": f"ca_{k}",
                    "org_id": "org_1",
                    "name": n,
                    "provider": "AWS",
                    "credentials_ciphertext": "x",
                    "created_at": now + timedelta(seconds=k),
                }
                for k, n in enumerate(["Prod", "prod"])
            ],
        )
        spaces = [("spc_1", "DEV", None), ("spc_2", "dev", None), ("spc_3", "dev", now)]
        connection.execute(
            table["spaces"].insert(),
            [
                {
                    "id": i,
                    "org_id": "org_1",
                    "name": n,
                    "provider": "GENERIC",
                    "space_type": "GENERIC",
                    "config_json": "{}",
                    "identity_key": i,
                    "synthetic": False,
                    "probe_status": "UNKNOWN",
                    "held": False,
                    "consecutive_failures": 0,
                    "next_probe_at": now,
                    "created_at": now + timedelta(seconds=k),
                    "deregistered_at": gone,
                }
                for k, (i, n, gone) in enumerate(spaces)
            ],
        )
        connection.commit()

    try:
        async with database.engine.connect() as connection:
            await connection.run_sync(legacy)
        await database.migrate()
        async with database.engine.connect() as connection:
            assert await connection.run_sync(_differences) == []
            keys: dict[str, dict[str, str | None]] = {
                table: dict(
                    (await connection.execute(sa.text(f"SELECT id, name_key FROM {table}"))).all()
                )
                for table in ("role_definitions", "cloud_accounts", "spaces")
            }
        assert keys["role_definitions"] == {"role_1": "tokmgr", "role_2": None, "role_3": "other"}
        assert keys["cloud_accounts"] == {"ca_0": "prod", "ca_1": None}
        # A deregistered space keeps its key: only live names must differ.
        assert keys["spaces"] == {"spc_1": "dev", "spc_2": None, "spc_3": "dev"}
    finally:
        await database.dispose()


async def test_orgs_holding_a_default_cloudspace_are_marked_as_given_one(
    empty_backend: Backend,
) -> None:
    """Issue 22 (0016): an org whose default CloudSpace `spacedock token create` made before
    this revision is marked as given it, so the server never makes it a second one; an
    org with none is left for the server (and one with only other CloudSpaces too)."""
    database = Database(empty_backend.url)
    now = datetime(2026, 1, 1)  # as UtcDateTime stores times: naive, in UTC

    def legacy(connection: sa.Connection) -> None:
        command.upgrade(alembic_config(connection), "0014")
        tables = sa.MetaData()
        table = {
            name: sa.Table(name, tables, autoload_with=connection)
            for name in ("orgs", "spaces", "cloud_spaces")
        }
        connection.execute(
            table["orgs"].insert(),
            [
                {"id": org_id, "name": org_id, "created_at": now}
                for org_id in ("org_platform", "org_served", "org_waiting", "org_own")
            ],
        )
        connection.execute(
            table["spaces"].insert(),
            {
                "id": "spc_host",
                "org_id": "org_platform",
                "name": "host",
                "provider": "GENERIC",
                "space_type": "GENERIC",
                "config_json": "{}",
                "identity_key": "spc_host",
                "synthetic": False,
                "probe_status": "UNKNOWN",
                "held": False,
                "consecutive_failures": 0,
                "next_probe_at": now,
                "created_at": now,
            },
        )
        connection.execute(
            table["cloud_spaces"].insert(),
            [
                {
                    "id": f"cs_{org_id}",
                    "org_id": org_id,
                    "name": name,
                    "host_space_id": "spc_host",
                    "cpu": 2.0,
                    "memory_mib": 4096,
                    "is_default": is_default,
                    "phase": "READY",
                    "step": "refresh",
                    "failures": 0,
                    "next_attempt_at": now,
                    "created_at": now + timedelta(minutes=5),
                }
                for org_id, name, is_default in (
                    ("org_served", "default", True),
                    ("org_own", "staging", False),
                )
            ],
        )
        connection.commit()

    try:
        async with database.engine.connect() as connection:
            await connection.run_sync(legacy)
        await database.migrate()
        async with database.engine.connect() as connection:
            assert await connection.run_sync(_differences) == []
            query = sa.select(col(Org.id), col(Org.default_cloud_space_at))
            marked: dict[str, datetime | None] = dict((await connection.execute(query)).all())
        assert marked == {
            "org_platform": None,
            "org_served": datetime(2026, 1, 1, 0, 5, tzinfo=UTC),
            "org_waiting": None,
            "org_own": None,
        }
    finally:
        await database.dispose()


async def test_each_cloudspace_gets_its_first_vcluster_at_its_own_step(
    empty_backend: Backend,
) -> None:
    """Issue 22 (0018): a CloudSpace from before several vClusters gets its one vCluster as a
    row, named like it and at the CloudSpace's step (a READY one's vCluster is READY, so its
    kubeconfigs keep working); one not yet at its vCluster's steps gets it at their first."""
    database = Database(empty_backend.url)
    now = datetime(2026, 1, 1)  # as UtcDateTime stores times: naive, in UTC

    def legacy(connection: sa.Connection) -> None:
        command.upgrade(alembic_config(connection), "0017")
        tables = sa.MetaData()
        table = {
            name: sa.Table(name, tables, autoload_with=connection)
            for name in ("orgs", "spaces", "cloud_spaces")
        }
        connection.execute(
            table["orgs"].insert(), {"id": "org_1", "name": "one", "created_at": now}
        )
        connection.execute(
            table["spaces"].insert(),
            {
                "id": "spc_host",
                "org_id": "org_1",
                "name": "host",
                "provider": "GENERIC",
                "space_type": "GENERIC",
                "config_json": "{}",
                "identity_key": "spc_host",
                "synthetic": False,
                "probe_status": "UNKNOWN",
                "held": False,
                "consecutive_failures": 0,
                "next_probe_at": now,
                "created_at": now,
            },
        )
        connection.execute(
            table["cloud_spaces"].insert(),
            [
                {
                    "id": f"cs_{'0' * 29}{n}",
                    "org_id": "org_1",
                    "name": name,
                    "host_space_id": "spc_host",
                    "cpu": 2.0,
                    "memory_mib": 4096,
                    "is_default": False,
                    "phase": phase,
                    "step": step,
                    "message": message,
                    "failures": 0,
                    "next_attempt_at": now,
                    "created_at": now,
                }
                for n, name, phase, step, message in (
                    (1, "ready", "READY", "refresh", None),
                    (2, "waiting", "INSTALLING_FLUX", "flux-ready", "Flux into the vCluster"),
                    (3, "young", "PROVISIONING", "host-namespace", None),
                    (4, "going", "DELETING", "namespace-gone", "NamespaceContentRemaining"),
                )
            ],
        )
        connection.commit()

    try:
        async with database.engine.connect() as connection:
            await connection.run_sync(legacy)
        await database.migrate()
        async with database.engine.connect() as connection:
            assert await connection.run_sync(_differences) == []
            rows = (
                await connection.execute(
                    sa.text(
                        "SELECT id, cloud_space_id, org_id, name, phase, step, message"
                        " FROM vclusters ORDER BY name"
                    )
                )
            ).all()
        assert [tuple(row) for row in rows] == [
            (
                f"vc_{'0' * 29}4",
                f"cs_{'0' * 29}4",
                "org_1",
                "going",
                "DELETING",
                "vcluster-release",
                None,
            ),
            (f"vc_{'0' * 29}1", f"cs_{'0' * 29}1", "org_1", "ready", "READY", "refresh", None),
            (
                f"vc_{'0' * 29}2",
                f"cs_{'0' * 29}2",
                "org_1",
                "waiting",
                "INSTALLING_FLUX",
                "flux-ready",
                "Flux into the vCluster",
            ),
            (
                f"vc_{'0' * 29}3",
                f"cs_{'0' * 29}3",
                "org_1",
                "young",
                "PENDING",
                "vcluster-release",
                None,
            ),
        ]
    finally:
        await database.dispose()
