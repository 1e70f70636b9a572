"""The persisted shape of spacedock, one SQLModel table per stored object: here the
stored times' column type and the tables every domain stands on (orgs, cloud accounts
and their grants, spaces with their status events, environments); each other domain's
tables are in a module of its own beside it (access_tables, cloudspace_tables,
admission_tables, app_tables, advisor_tables), which db/migrations/env.py registers.

Rows carry ids, never secrets in clear: credential columns hold Fernet
ciphertext produced by `core.common.secrets`. Uniqueness that only applies to live
(registered) spaces is expressed as partial indexes, which both SQLite and
Postgres support.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.types import TypeDecorator
from sqlmodel import Field, SQLModel


class UtcDateTime(TypeDecorator[datetime]):
    """Stores naive UTC and always hands back aware UTC datetimes, on both engines."""

    impl = sa.DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetimes are not stored")
        return value.astimezone(UTC).replace(tzinfo=None)

    def result_processor(
        self, dialect: sa.Dialect, coltype: object
    ) -> Callable[[Any], datetime | None]:
        # Cheap on purpose: a page of spaces reads hundreds (datetime.replace costs 0.7 µs,
        # six times a parse).
        if dialect.name == "sqlite":
            return _from_text
        return lambda naive: None if naive is None else _combine(naive, naive.time(), UTC)


_parse_iso = datetime.fromisoformat
_combine = datetime.combine


def _from_text(text: str | None) -> datetime | None:
    """SQLite's ISO text, naive UTC as written here, parsed with its zone in one step;
    text written elsewhere with an offset of its own is honoured."""
    if text is None:
        return None
    try:
        return _parse_iso(text + "+00:00")
    except ValueError:
        return _parse_iso(text).astimezone(UTC)


def utc_time(nullable: bool = False, index: bool = False) -> datetime:
    """A UtcDateTime column."""
    return Field(sa_column=sa.Column(UtcDateTime(), nullable=nullable, index=index))  # type: ignore[no-any-return]


LIVE = sa.text("deregistered_at IS NULL")


class Org(SQLModel, table=True):
    __tablename__ = "orgs"

    id: str = Field(primary_key=True)
    name: str = Field(unique=True)
    created_at: datetime = utc_time()
    # When the org was given its default CloudSpace (core.cloudspaces.defaults); null until
    # then. Set once, in the transaction that makes it, so no replica makes a second one
    # and one its admins deleted is not made again.
    default_cloud_space_at: datetime | None = utc_time(nullable=True)


class CloudAccount(SQLModel, table=True):
    __tablename__ = "cloud_accounts"
    __table_args__ = (
        sa.UniqueConstraint("org_id", "name", name="uq_cloud_accounts_org_name"),
        sa.Index("uq_cloud_accounts_org_name_key", "org_id", "name_key", unique=True),
    )

    id: str = Field(primary_key=True)
    org_id: str = Field(foreign_key="orgs.id", index=True, ondelete="CASCADE")
    name: str
    name_key: str | None = None  # core.common.names.name_key; null only for rows older than it
    provider: str
    credentials_ciphertext: str
    created_at: datetime = utc_time()


class ClusterGrant(SQLModel, table=True):
    """A cloud account's permission to mint credentials for one cluster."""

    __tablename__ = "cluster_grants"
    __table_args__ = (
        sa.UniqueConstraint("cloud_account_id", "cluster_key", name="uq_cluster_grants_key"),
    )

    id: str = Field(primary_key=True)
    cloud_account_id: str = Field(foreign_key="cloud_accounts.id", index=True, ondelete="CASCADE")
    cluster_key: str
    region: str
    cluster_name: str
    resource_group: str | None = None
    granted_at: datetime = utc_time()


class Space(SQLModel, table=True):
    __tablename__ = "spaces"
    __table_args__ = (
        sa.Index(
            "uq_spaces_live_name",
            "org_id",
            "name",
            unique=True,
            sqlite_where=LIVE,
            postgresql_where=LIVE,
        ),
        sa.Index(
            "uq_spaces_live_name_key",
            "org_id",
            "name_key",
            unique=True,
            sqlite_where=LIVE,
            postgresql_where=LIVE,
        ),
        sa.Index(
            "uq_spaces_live_identity",
            "org_id",
            "identity_key",
            unique=True,
            sqlite_where=LIVE,
            postgresql_where=LIVE,
        ),
        sa.Index("ix_spaces_probe_due", "next_probe_at", sqlite_where=LIVE, postgresql_where=LIVE),
        # SpaceFilter.search is a case-insensitive substring: a trigram index serves it on
        # Postgres (the migration enables pg_trgm); on SQLite it is a plain index on name.
        sa.Index(
            "ix_spaces_name_search",
            "name",
            postgresql_using="gin",
            postgresql_ops={"name": "gin_trgm_ops"},
        ),
    )

    id: str = Field(primary_key=True)
    org_id: str = Field(foreign_key="orgs.id", index=True, ondelete="CASCADE")
    name: str
    name_key: str | None = None  # core.common.names.name_key; null only for rows older than it
    provider: str
    space_type: str
    cloud_account_id: str | None = Field(
        default=None, foreign_key="cloud_accounts.id", index=True, ondelete="SET NULL"
    )
    # Public provider identity as JSON; secrets live only in secret_ciphertext.
    config_json: str
    identity_key: str
    secret_ciphertext: str | None = None
    synthetic: bool = False
    # Status as the probes give it; the operator hold and staleness apply on top.
    probe_status: str = "UNKNOWN"
    held: bool = False
    consecutive_failures: int = 0
    last_probe_at: datetime | None = utc_time(nullable=True)
    last_probe_ok: bool | None = None
    last_probe_version: str | None = None
    last_probe_latency_ms: float | None = None
    last_probe_error: str | None = None
    # The StatusReasonCode of last_probe_error (core.spaces.reasons).
    last_probe_error_code: str | None = None
    next_probe_at: datetime = utc_time()
    created_at: datetime = utc_time()
    deregistered_at: datetime | None = utc_time(nullable=True)


class SpaceStatusEvent(SQLModel, table=True):
    __tablename__ = "space_status_events"
    __table_args__ = (sa.Index("ix_space_status_events_space", "space_id", "id"),)

    id: int | None = Field(default=None, primary_key=True)
    space_id: str = Field(foreign_key="spaces.id", ondelete="CASCADE")
    org_id: str = Field(index=True)
    previous: str | None = None
    status: str
    reason: str | None = None
    # The StatusReasonCode of reason (core.spaces.reasons); null only on rows older than it.
    reason_code: str | None = None
    at: datetime = utc_time()


class Environment(SQLModel, table=True):
    __tablename__ = "environments"
    __table_args__ = (
        sa.UniqueConstraint("org_id", "name", name="uq_environments_org_name"),
        sa.Index("uq_environments_org_name_key", "org_id", "name_key", unique=True),
    )

    id: str = Field(primary_key=True)
    org_id: str = Field(foreign_key="orgs.id", index=True, ondelete="CASCADE")
    name: str
    name_key: str | None = None  # core.common.names.name_key; null only for rows older than it
    space_id: str = Field(foreign_key="spaces.id", index=True)
    namespace: str
    created_at: datetime = utc_time()
