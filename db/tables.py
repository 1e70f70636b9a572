"""The persisted shape of spacedock: one SQLModel table per stored object.

Rows carry ids, never secrets in clear: credential columns hold Fernet
ciphertext produced by `core.secrets`. Uniqueness that only applies to live
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


def _time(nullable: bool = False, index: bool = False) -> datetime:
    return Field(sa_column=sa.Column(UtcDateTime(), nullable=nullable, index=index))  # type: ignore[no-any-return]


LIVE = sa.text("deregistered_at IS NULL")


class Org(SQLModel, table=True):
    __tablename__ = "orgs"

    id: str = Field(primary_key=True)
    name: str = Field(unique=True)
    created_at: datetime = _time()


class RoleDefinition(SQLModel, table=True):
    """An org's custom role: a named set of policies (system roles are not stored)."""

    __tablename__ = "role_definitions"
    __table_args__ = (sa.UniqueConstraint("org_id", "name", name="uq_role_definitions_org_name"),)

    id: str = Field(primary_key=True)
    org_id: str = Field(foreign_key="orgs.id", index=True, ondelete="CASCADE")
    name: str
    # The policies as a JSON list of strings.
    policies_json: str
    created_at: datetime = _time()


class ApiToken(SQLModel, table=True):
    __tablename__ = "api_tokens"

    id: str = Field(primary_key=True)
    org_id: str = Field(foreign_key="orgs.id", index=True, ondelete="CASCADE")
    name: str = ""
    # ADMIN, EDITOR, VIEWER, or CUSTOM with custom_role_id set.
    role: str
    # A role in use by a token cannot be deleted: RESTRICT keeps the database honest too.
    custom_role_id: str | None = Field(
        default=None, foreign_key="role_definitions.id", index=True, ondelete="RESTRICT"
    )
    token_hash: str = Field(unique=True)
    created_at: datetime = _time()
    expires_at: datetime | None = _time(nullable=True)
    last_used_at: datetime | None = _time(nullable=True)
    revoked_at: datetime | None = _time(nullable=True)


class CloudAccount(SQLModel, table=True):
    __tablename__ = "cloud_accounts"
    __table_args__ = (sa.UniqueConstraint("org_id", "name", name="uq_cloud_accounts_org_name"),)

    id: str = Field(primary_key=True)
    org_id: str = Field(foreign_key="orgs.id", index=True, ondelete="CASCADE")
    name: str
    provider: str
    credentials_ciphertext: str
    created_at: datetime = _time()


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
    granted_at: datetime = _time()


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
    last_probe_at: datetime | None = _time(nullable=True)
    last_probe_ok: bool | None = None
    last_probe_version: str | None = None
    last_probe_latency_ms: float | None = None
    last_probe_error: str | None = None
    # The StatusReasonCode of last_probe_error (core.reasons).
    last_probe_error_code: str | None = None
    next_probe_at: datetime = _time()
    created_at: datetime = _time()
    deregistered_at: datetime | None = _time(nullable=True)


class SpaceStatusEvent(SQLModel, table=True):
    __tablename__ = "space_status_events"
    __table_args__ = (sa.Index("ix_space_status_events_space", "space_id", "id"),)

    id: int | None = Field(default=None, primary_key=True)
    space_id: str = Field(foreign_key="spaces.id", ondelete="CASCADE")
    org_id: str = Field(index=True)
    previous: str | None = None
    status: str
    reason: str | None = None
    # The StatusReasonCode of reason (core.reasons); null only on rows older than it.
    reason_code: str | None = None
    at: datetime = _time()


class Environment(SQLModel, table=True):
    __tablename__ = "environments"
    __table_args__ = (sa.UniqueConstraint("org_id", "name", name="uq_environments_org_name"),)

    id: str = Field(primary_key=True)
    org_id: str = Field(foreign_key="orgs.id", index=True, ondelete="CASCADE")
    name: str
    space_id: str = Field(foreign_key="spaces.id", index=True)
    namespace: str
    created_at: datetime = _time()


# -- CloudSpaces (issue 9) ----------------------------------------------------


class CloudSpace(SQLModel, table=True):
    """A tenant's vCluster on a host space, and where its reconciler stands.

    `step` is the reconciler's persisted position (its phase follows from it), so a
    crash or a FAILED retry resumes exactly there. `claimed_by` / `lease_until` lease
    the row to one reconciler at a time; `next_attempt_at` says when it is due.
    """

    __tablename__ = "cloud_spaces"
    __table_args__ = (
        sa.UniqueConstraint("org_id", "name", name="uq_cloud_spaces_org_name"),
        sa.Index("ix_cloud_spaces_due", "next_attempt_at"),
    )

    id: str = Field(primary_key=True)
    org_id: str = Field(foreign_key="orgs.id", index=True, ondelete="CASCADE")
    name: str
    host_space_id: str = Field(foreign_key="spaces.id", index=True)
    cpu: float
    memory_mib: int
    is_default: bool = False
    phase: str = "PENDING"
    step: str
    message: str | None = None
    failures: int = 0
    usage_cpu: float | None = None
    usage_memory_mib: int | None = None
    next_attempt_at: datetime = _time()
    claimed_by: str | None = None
    lease_until: datetime | None = _time(nullable=True)
    created_at: datetime = _time()


class CloudSpaceEvent(SQLModel, table=True):
    """A phase or message change; kept after its CloudSpace is gone (DELETED is the last)."""

    __tablename__ = "cloud_space_events"
    __table_args__ = (sa.Index("ix_cloud_space_events_cloud_space", "cloud_space_id", "id"),)

    id: int | None = Field(default=None, primary_key=True)
    cloud_space_id: str
    org_id: str = Field(index=True)
    previous: str | None = None
    phase: str
    message: str | None = None
    at: datetime = _time()


# -- Access: the audit log (issue 11) -----------------------------------------


class AuditEvent(SQLModel, table=True):
    """One mutation call, allowed or refused; the input is stored with secrets redacted."""

    __tablename__ = "audit_events"
    __table_args__ = (sa.Index("ix_audit_events_org_id_id", "org_id", "id"),)

    id: str = Field(primary_key=True)
    org_id: str = Field(foreign_key="orgs.id", ondelete="CASCADE")
    at: datetime = _time(index=True)
    actor: str
    actor_kind: str
    action: str
    # JSON list of the ids the call named or created.
    target_ids_json: str
    outcome: str
    input_json: str | None = None
    request_id: str | None = None
