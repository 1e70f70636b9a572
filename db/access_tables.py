"""Access's tables: an org's custom roles, its API tokens and the audit log of every
mutation call (issue 11). Beside db/tables.py, whose orgs they belong to."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

from db.tables import utc_time


class RoleDefinition(SQLModel, table=True):
    """An org's custom role: a named set of policies (system roles are not stored)."""

    __tablename__ = "role_definitions"
    __table_args__ = (
        sa.UniqueConstraint("org_id", "name", name="uq_role_definitions_org_name"),
        sa.Index("uq_role_definitions_org_name_key", "org_id", "name_key", unique=True),
    )

    id: str = Field(primary_key=True)
    org_id: str = Field(foreign_key="orgs.id", index=True, ondelete="CASCADE")
    name: str
    name_key: str | None = None  # core.common.names.name_key; null only for rows older than it
    # The policies as a JSON list of strings.
    policies_json: str
    created_at: datetime = utc_time()


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
    created_at: datetime = utc_time()
    expires_at: datetime | None = utc_time(nullable=True)
    last_used_at: datetime | None = utc_time(nullable=True)
    revoked_at: datetime | None = utc_time(nullable=True)


class AuditEvent(SQLModel, table=True):
    """One mutation call, allowed or refused; the input is stored with secrets redacted."""

    __tablename__ = "audit_events"
    __table_args__ = (sa.Index("ix_audit_events_org_id_id", "org_id", "id"),)

    id: str = Field(primary_key=True)
    org_id: str = Field(foreign_key="orgs.id", ondelete="CASCADE")
    at: datetime = utc_time(index=True)
    # The token's name or the OIDC subject, sanitised (core.access.audit.sanitised).
    actor: str
    actor_kind: str
    # The API token that made the call: unique, unlike its name (None for OIDC).
    actor_token_id: str | None = None
    action: str
    # JSON list of the ids the call named or created.
    target_ids_json: str
    outcome: str
    input_json: str | None = None
    request_id: str | None = None
    # How many calls the event stands for: 1, or the refused calls of one summary.
    calls: int = Field(default=1, sa_column_kwargs={"server_default": "1"})
    # API, or CLI: an operator's `spacedock` command (core.access.audit.Via).
    via: str = Field(default="API", sa_column_kwargs={"server_default": "API"})
