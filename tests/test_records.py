"""The read path's records hold what their tables hold (db.records): a column added to a
table, or one whose type changes, fails here until its record carries it or names it
unread; and a page read as records gives each field the value the ORM row has, on SQLite
and Postgres, so the SELECT built from a record lines up with it."""

from __future__ import annotations

import types
import typing
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from core.common.ids import new_id
from db import environments as environment_rows
from db import spaces as space_rows
from db.engine import Database
from db.pages import Keyset
from db.records import (
    ACCOUNT_READ,
    ENVIRONMENT_READ,
    SPACE_READ,
    STATUS_EVENT_READ,
    CloudAccountRecord,
    Read,
    SpaceWhere,
)
from db.tables import CloudAccount, Environment, Org, Space, SpaceStatusEvent
from tests.support.server import Backend

READS = (SPACE_READ, ACCOUNT_READ, STATUS_EVENT_READ, ENVIRONMENT_READ)


def _without_none(hint: Any) -> Any:
    """`int | None` as `int`: a primary key the database assigns is None only before insert."""
    parts = [part for part in typing.get_args(hint) if part is not type(None)]
    if isinstance(hint, types.UnionType) and len(parts) == 1:
        return parts[0]
    return hint


def test_each_record_is_its_tables_columns_in_order_less_those_named_unread() -> None:
    for read in READS:
        table = sa.inspect(read.table).local_table
        expected = [column.name for column in table.columns if column.name not in read.unread]
        assert list(read.names) == expected, (
            f"{read.record.__name__} must list {read.table.__name__}'s columns in order, "
            f"less {sorted(read.unread)}: add a new column to it or to its unread"
        )
        assert read.unread <= set(table.columns.keys()), f"{read.record.__name__}: stale unread"


def test_each_record_field_has_its_columns_type() -> None:
    for read in READS:
        table = sa.inspect(read.table).local_table
        columns = typing.get_type_hints(read.table)
        fields = typing.get_type_hints(read.record)
        for name in read.names:
            column = columns[name]
            if table.c[name].primary_key:
                column = _without_none(column)
            assert fields[name] == column, f"{read.record.__name__}.{name}: {fields[name]}"


def test_links_come_after_the_columns() -> None:
    assert SPACE_READ.links == ("account",)
    assert typing.get_type_hints(SPACE_READ.record)["account"] == CloudAccountRecord | None
    plain = Read(Environment, ENVIRONMENT_READ.record, ENVIRONMENT_READ.unread)
    assert plain.names == ENVIRONMENT_READ.names


def _same(record: Any, row: Any, read: Read) -> None:
    for name in read.names:
        assert getattr(record, name) == getattr(row, name), f"{read.record.__name__}.{name}"


async def test_records_read_what_the_rows_hold(empty_backend: Backend) -> None:
    database = Database(empty_backend.url)
    await database.migrate()
    now = datetime.now(UTC).replace(microsecond=0)
    org_id = new_id("org")
    try:
        async with database.transaction() as session:
            session.add(Org(id=org_id, name=org_id, created_at=now))
            await session.flush()
            account = CloudAccount(
                id=new_id("ca"),
                org_id=org_id,
                name="acct",
                name_key="acct",
                provider="AWS",
                credentials_ciphertext="sealed",
                created_at=now,
            )
            space = Space(
                id=new_id("spc"),
                org_id=org_id,
                name="one",
                name_key="one",
                provider="AWS",
                space_type="EKS",
                cloud_account_id=account.id,
                config_json="{}",
                identity_key="k",
                secret_ciphertext="secret",
                probe_status="ACTIVE",
                held=True,
                consecutive_failures=2,
                last_probe_at=now - timedelta(seconds=5),
                last_probe_ok=False,
                last_probe_version="v1.30.1",
                last_probe_latency_ms=12.5,
                last_probe_error="refused",
                last_probe_error_code="UNREACHABLE",
                next_probe_at=now,
                created_at=now - timedelta(days=1),
            )
            environment = Environment(
                id=new_id("env"),
                org_id=org_id,
                name="dev",
                name_key="dev",
                space_id=space.id,
                namespace="team-dev",
                created_at=now,
            )
            session.add(account)
            await session.flush()
            session.add(space)
            await session.flush()
            session.add(environment)
            await space_rows.add_event(
                session,
                SpaceStatusEvent(
                    space_id=space.id,
                    org_id=org_id,
                    previous="UNKNOWN",
                    status="ACTIVE",
                    reason="probed",
                    reason_code="OK",
                    at=now,
                ),
            )
        async with database.transaction(read_only=True) as session:
            stored_space = await session.get(Space, space.id)
            stored_account = await session.get(CloudAccount, account.id)
            stored_environment = await session.get(Environment, environment.id)
            stored_event = (await session.scalars(sa.select(SpaceStatusEvent))).one()
            page = await space_rows.list_spaces(
                session,
                org_id,
                SpaceWhere(),
                Keyset(10),
                stale_before=now - timedelta(hours=1),
                with_accounts=True,
            )
            environments = await environment_rows.environments_of_spaces(session, [space.id])
            events = await space_rows.recent_events(session, [space.id], 5)
        [record] = page.items
        _same(record, stored_space, SPACE_READ)
        assert record.account is not None
        _same(record.account, stored_account, ACCOUNT_READ)
        [environment_record] = environments
        _same(environment_record, stored_environment, ENVIRONMENT_READ)
        [event_record] = events[space.id]
        _same(event_record, stored_event, STATUS_EVENT_READ)
    finally:
        await database.dispose()
