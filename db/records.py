"""The shapes the read path hands up the layers: records of rows read for lists (their
columns in tuples, no ORM object to build and track; issue 12), the unions read-only code
takes (a record or its ORM row), and the filters of list reads. No query lives here, so
schema/ may name these without reaching the database (import-linter).

A record is its table's columns, in the table's order, less the ones it names unread,
then the links a read adds (`Read`): the SELECTs are built from `Read.columns` and nothing
else, and tests/test_records.py holds each record to its table, names and types, so a
column added to a table fails there until its record carries it or names it unread. The
records stay declared (not made from the table at run time) so that mypy checks every
field read on them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

import sqlalchemy as sa
from sqlmodel import SQLModel

from db.tables import CloudAccount, Environment, Space, SpaceStatusEvent


@dataclass(frozen=True)
class Read:
    """How `record` reads `table`: the table's columns in order, less `unread` (columns no
    read shows, left out on purpose), then `links` (fields a read fills that are no column)."""

    table: type[SQLModel]
    record: type[tuple[Any, ...]]  # a NamedTuple
    unread: frozenset[str] = frozenset()
    links: tuple[str, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        """The record's column fields, as the SELECT lists them."""
        fields = tuple(self.record.__annotations__)  # a NamedTuple's, in its order
        return fields[: len(fields) - len(self.links)]

    @property
    def columns(self) -> tuple[sa.Column[Any], ...]:
        """The table's columns the record holds, in its order: what a SELECT of it lists."""
        table = sa.inspect(self.table).local_table
        return tuple(table.c[name] for name in self.names)


class CloudAccountRecord(NamedTuple):
    """A cloud account read with a page of spaces: its columns in a tuple (issue 12).
    Read-only code takes either (`CloudAccountRow`)."""

    id: str
    org_id: str
    name: str
    provider: str
    credentials_ciphertext: str
    created_at: datetime


CloudAccountRow = CloudAccount | CloudAccountRecord
ACCOUNT_READ = Read(CloudAccount, CloudAccountRecord, unread=frozenset({"name_key"}))


@dataclass(frozen=True)
class SpaceWhere:
    """Which spaces a list or count covers; every condition given must hold."""

    statuses: Sequence[str] | None = None
    provider: str | None = None
    providers: Sequence[str] | None = None
    cloud_account_ids: Sequence[str] | None = None
    held: bool | None = None
    search: str | None = None
    scalable: bool | None = None
    include_deregistered: bool = False


@dataclass(frozen=True)
class CloudSpaceWhere:
    """Which of an org's CloudSpaces a list holds; every condition given must hold."""

    phases: Sequence[str] | None = None
    # Host spaces of the org's own: another org's host (the platform's) matches nothing.
    host_space_ids: Sequence[str] | None = None
    # Case-insensitive substring of the name.
    search: str | None = None


class SpaceRecord(NamedTuple):
    """A space as a page of spaces shows it: the columns reads use, in a tuple, no ORM
    object to build and track (issue 12). Read-only code takes either (`SpaceRow`)."""

    id: str
    org_id: str
    name: str
    provider: str
    space_type: str
    cloud_account_id: str | None
    config_json: str
    secret_ciphertext: str | None
    synthetic: bool
    probe_status: str
    held: bool
    consecutive_failures: int
    last_probe_at: datetime | None
    last_probe_ok: bool | None
    last_probe_version: str | None
    last_probe_latency_ms: float | None
    last_probe_error: str | None
    last_probe_error_code: str | None
    created_at: datetime
    deregistered_at: datetime | None
    # Its cloud account, when the page was read with them (`list_spaces(with_accounts=)`).
    account: CloudAccountRecord | None = None


SpaceRow = Space | SpaceRecord
# The keys of uniqueness and the probe queue's position are the writers' business.
SPACE_READ = Read(
    Space,
    SpaceRecord,
    unread=frozenset({"name_key", "identity_key", "next_probe_at"}),
    links=("account",),
)


class StatusEventRecord(NamedTuple):
    """A status event as a list read shows it: its columns in a tuple, no ORM object
    (issue 12)."""

    id: int
    space_id: str
    previous: str | None
    status: str
    reason: str | None
    reason_code: str | None
    at: datetime


# An event is read through its space, whose org is already known.
STATUS_EVENT_READ = Read(SpaceStatusEvent, StatusEventRecord, unread=frozenset({"org_id"}))


class EnvironmentRecord(NamedTuple):
    """An environment as a list read shows it: its columns in a tuple, no ORM object to
    build and track (issue 12: ORM rows were a tenth of a 100-space read's CPU)."""

    id: str
    name: str
    space_id: str
    namespace: str


ENVIRONMENT_READ = Read(
    Environment, EnvironmentRecord, unread=frozenset({"org_id", "name_key", "created_at"})
)


@dataclass(frozen=True)
class AuditWhere:
    actor: str | None = None
    action: str | None = None
    target_id: str | None = None
    since: datetime | None = None
    actor_token_id: str | None = None
    via: str | None = None
