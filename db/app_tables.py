"""Apps' tables (issue 23): a Git or Helm source Flux delivers into a target, its revisions
and the changes of its status. Beside db/tables.py, whose orgs they belong to."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

from db.tables import utc_time


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
    sync_requested_at: datetime | None = utc_time(nullable=True)
    # What the cluster was last given: the revision number, suspension and sync request.
    delivered_revision: int | None = None
    delivered_suspended: bool = False
    delivered_sync_at: datetime | None = utc_time(nullable=True)
    deleting: bool = False
    # What Flux says (core.apps.status), as last read.
    status: str = "PROGRESSING"
    status_reason: str | None = None
    status_message: str | None = None
    last_applied_revision: str | None = None
    last_attempted_revision: str | None = None
    last_handled_sync_at: str | None = None
    workloads_json: str = "[]"
    status_read_at: datetime | None = utc_time(nullable=True)
    revision_count: int = 0
    delivery_due_at: datetime | None = utc_time(nullable=True)
    claimed_by: str | None = None
    lease_until: datetime | None = utc_time(nullable=True)
    status_due_at: datetime = utc_time()
    created_at: datetime = utc_time()


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
    created_at: datetime = utc_time()
    state: str = "QUEUED"
    tries: int = 0
    reason: str | None = None
    # The generations the apply gave the source and the Kustomization or HelmRelease, so the
    # status loop knows when Flux has answered for this revision.
    source_generation: int | None = None
    deploy_generation: int | None = None
    applied_at: datetime | None = utc_time(nullable=True)
    finished_at: datetime | None = utc_time(nullable=True)
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
    at: datetime = utc_time()
