"""The persisted shape of spacedock: one SQLModel table per stored object.

Rows carry ids, never secrets in clear: credential columns hold Fernet
ciphertext produced by `core.common.secrets`. Uniqueness that only applies to live
(registered) spaces is expressed as partial indexes, which both SQLite and
Postgres support. Strict quota's tables are in db/admission_tables.py.
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
    # When the org was given its default CloudSpace (core.cloudspaces.defaults); null until
    # then. Set once, in the transaction that makes it, so no replica makes a second one
    # and one its admins deleted is not made again.
    default_cloud_space_at: datetime | None = _time(nullable=True)


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
    last_probe_at: datetime | None = _time(nullable=True)
    last_probe_ok: bool | None = None
    last_probe_version: str | None = None
    last_probe_latency_ms: float | None = None
    last_probe_error: str | None = None
    # The StatusReasonCode of last_probe_error (core.spaces.reasons).
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
    # The StatusReasonCode of reason (core.spaces.reasons); null only on rows older than it.
    reason_code: str | None = None
    at: datetime = _time()


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
        # At most one default CloudSpace per org, whatever made it.
        sa.Index(
            "uq_cloud_spaces_one_default",
            "org_id",
            unique=True,
            sqlite_where=sa.text("is_default"),
            postgresql_where=sa.text("is_default"),
        ),
    )

    id: str = Field(primary_key=True)
    org_id: str = Field(foreign_key="orgs.id", index=True, ondelete="CASCADE")
    name: str
    host_space_id: str = Field(foreign_key="spaces.id", index=True)
    cpu: float
    memory_mib: int
    is_default: bool = False
    phase: str = "PENDING"  # a core.spaces.statuses.CloudSpacePhase
    step: str  # a core.cloudspaces.Step
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
    # Set when the change is one vCluster's (db.vcluster_tables); kept after it is removed.
    vcluster_id: str | None = None
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


# -- Apps (issue 23) ----------------------------------------------------------


class App(SQLModel, table=True):
    """A Git or Helm source Flux delivers into a target: a CloudSpace's vCluster, or an
    environment's namespace on its space.

    The source an app asks for lives on its revisions (AppRevision); the row holds the
    target, the sealed Git credential, what Flux last reported (`status_*`, read by the
    status loop) and two queues: the delivery worker's (`delivery_due_at`, leased with
    `claimed_by` / `lease_until`, like the CloudSpace reconciler) and the status loop's
    (`status_due_at`, claimed like probes). `cloud_space_id` has no foreign key: an app
    outlives its CloudSpace's row, gated, until it is deleted.
    """

    __tablename__ = "apps"
    __table_args__ = (
        # A name is unique per target: `target_key` is "cs:<id>/<vcluster>" or "env:<id>".
        sa.UniqueConstraint("org_id", "target_key", "name", name="uq_apps_target_name"),
        sa.Index("ix_apps_delivery_due", "delivery_due_at"),
        sa.Index("ix_apps_status_due", "status_due_at"),
    )

    id: str = Field(primary_key=True)
    org_id: str = Field(foreign_key="orgs.id", index=True, ondelete="CASCADE")
    name: str
    target_key: str
    cloud_space_id: str | None = Field(default=None, index=True)
    vcluster: str | None = None
    environment_id: str | None = Field(default=None, index=True)
    namespace: str
    source_kind: str  # GIT or HELM (core.apps.sources.SourceKind)
    credential_ciphertext: str | None = None
    suspended: bool = False
    # Set by syncApp; the worker copies it to reconcile.fluxcd.io/requestedAt.
    sync_requested_at: datetime | None = _time(nullable=True)
    # What the cluster was last given: the revision number, suspension and sync request.
    delivered_revision: int | None = None
    delivered_suspended: bool = False
    delivered_sync_at: datetime | None = _time(nullable=True)
    deleting: bool = False
    # What Flux says (core.apps.status), as last read.
    status: str = "PROGRESSING"
    status_reason: str | None = None
    status_message: str | None = None
    last_applied_revision: str | None = None
    last_attempted_revision: str | None = None
    last_handled_sync_at: str | None = None
    workloads_json: str = "[]"
    status_read_at: datetime | None = _time(nullable=True)
    revision_count: int = 0
    delivery_due_at: datetime | None = _time(nullable=True)
    claimed_by: str | None = None
    lease_until: datetime | None = _time(nullable=True)
    status_due_at: datetime = _time()
    created_at: datetime = _time()


class AppRevision(SQLModel, table=True):
    """One change of an app's source, numbered per app, and how its delivery went:
    QUEUED → APPLYING → APPLIED → READY or FAILED; DEAD_LETTERED after its tries against
    an unavailable target; SUPERSEDED when a later one was applied first."""

    __tablename__ = "app_revisions"
    __table_args__ = (
        sa.UniqueConstraint("app_id", "number", name="uq_app_revisions_number"),
        sa.Index("ix_app_revisions_app_state", "app_id", "state"),
    )

    id: str = Field(primary_key=True)
    app_id: str = Field(foreign_key="apps.id", ondelete="CASCADE")
    org_id: str = Field(index=True)
    number: int
    source_json: str  # the source it asks for (core.apps.sources), never a credential
    # The revision it copies (rollbackApp), by number.
    rollback_of: int | None = None
    created_by: str
    created_at: datetime = _time()
    state: str = "QUEUED"
    tries: int = 0
    reason: str | None = None
    # The generations the apply gave the source and the Kustomization or HelmRelease, so the
    # status loop knows when Flux has answered for this revision.
    source_generation: int | None = None
    deploy_generation: int | None = None
    applied_at: datetime | None = _time(nullable=True)
    finished_at: datetime | None = _time(nullable=True)
    # The revision Flux reports once it is READY (`main@sha1:…`, a chart version).
    flux_revision: str | None = None


class AppEvent(SQLModel, table=True):
    """A change of an app's status or of one of its revisions; kept after the app is gone
    (DELETED is the last)."""

    __tablename__ = "app_events"
    __table_args__ = (sa.Index("ix_app_events_app", "app_id", "id"),)

    id: int | None = Field(default=None, primary_key=True)
    app_id: str
    org_id: str = Field(index=True)
    cloud_space_id: str | None = None
    environment_id: str | None = None
    kind: str  # STATUS, REVISION or DELETED (core.apps.history)
    previous_status: str | None = None
    status: str
    reason: str | None = None
    message: str | None = None
    revision_id: str | None = None
    revision_number: int | None = None
    revision_state: str | None = None
    at: datetime = _time()


# -- The App Advisor (issue 24) -------------------------------------------------


class AdvisorSchedule(SQLModel, table=True):
    """When the advisor next reads a READY CloudSpace, who holds it meanwhile (a lease,
    as for the reconciler), and how its last run went. Made when the advisor first sees
    the CloudSpace READY; gone with the CloudSpace."""

    __tablename__ = "advisor_schedules"
    __table_args__ = (sa.Index("ix_advisor_schedules_due", "next_run_at"),)

    cloud_space_id: str = Field(primary_key=True, foreign_key="cloud_spaces.id", ondelete="CASCADE")
    org_id: str = Field(index=True)
    next_run_at: datetime = _time()
    claimed_by: str | None = None
    lease_until: datetime | None = _time(nullable=True)
    enabled_at: datetime = _time()
    last_run_at: datetime | None = _time(nullable=True)
    last_error: str | None = None
    failures: int = 0
    objects_read: int | None = None
    # The last run read some list only up to its bound: it resolved nothing.
    truncated: bool = False


class AdvisorFinding(SQLModel, table=True):
    """One rule's finding on one object of a CloudSpace, kept across runs by its
    fingerprint (core.advisor.model.fingerprint) until resolved, and after for a while."""

    __tablename__ = "advisor_findings"
    __table_args__ = (
        sa.UniqueConstraint(
            "cloud_space_id", "fingerprint", name="uq_advisor_findings_fingerprint"
        ),
        sa.Index("ix_advisor_findings_list", "cloud_space_id", "severity_order", "id"),
        sa.Index("ix_advisor_findings_explain_due", "explain_due_at"),
    )

    id: str = Field(primary_key=True)
    org_id: str = Field(foreign_key="orgs.id", index=True, ondelete="CASCADE")
    cloud_space_id: str = Field(foreign_key="cloud_spaces.id", ondelete="CASCADE")
    fingerprint: str
    rule_id: str
    family: str
    severity: str
    # "0" CRITICAL, "1" WARNING, "2" INFO: lists sort most severe first (text, as cursors carry it).
    severity_order: str
    kind: str
    namespace: str
    name: str
    app_id: str | None = Field(default=None, index=True)
    title: str
    # JSON list of [text, shared]: shared lines may reach the explaining model, masked.
    evidence_json: str
    suggestion: str
    patch: str | None = None
    # JSON {"names": [...], "images": [...]} the finding mentions: masked before a model sees them.
    names_json: str
    content_digest: str
    explanation: str | None = None
    explained_at: datetime | None = _time(nullable=True)
    # When the explainer should ask the model (null: explained, or not to be).
    explain_due_at: datetime | None = _time(nullable=True)
    explain_attempts: int = 0
    first_seen_at: datetime = _time()
    last_seen_at: datetime = _time()
    changed_at: datetime = _time()
    resolved_at: datetime | None = _time(nullable=True)
    dismissed_at: datetime | None = _time(nullable=True)
    dismiss_reason: str | None = None
    dismissed_by: str | None = None


class AdvisorExemption(SQLModel, table=True):
    """A rule the advisor does not run on one CloudSpace."""

    __tablename__ = "advisor_exemptions"

    cloud_space_id: str = Field(primary_key=True, foreign_key="cloud_spaces.id", ondelete="CASCADE")
    rule_id: str = Field(primary_key=True)
    org_id: str = Field(index=True)
    reason: str
    created_by: str
    created_at: datetime = _time()


class AdviceEvent(SQLModel, table=True):
    """One batch of finding changes of a CloudSpace (a run's, or one dismissal's): what
    adviceChanged streams, kept a day so replicas can replay what they missed (issue 19)."""

    __tablename__ = "advice_events"
    __table_args__ = (sa.Index("ix_advice_events_cloud_space", "cloud_space_id", "id"),)

    id: int | None = Field(default=None, primary_key=True)
    org_id: str = Field(index=True)
    cloud_space_id: str
    # JSON list of [finding id, change]: NEW, CHANGED, RESOLVED, REOPENED, DISMISSED,
    # RESTORED, EXPLAINED (core.advisor.findings.Change).
    changes_json: str
    at: datetime = _time(index=True)
