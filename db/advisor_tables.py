"""The App Advisor's tables (issue 24): when it next reads a CloudSpace, what it found
there, the rules a CloudSpace is exempt from, and the batches of changes adviceChanged
streams. Beside db/cloudspace_tables.py, whose CloudSpaces they belong to."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

import db.cloudspace_tables  # noqa: F401  (cloud_spaces, which their foreign keys name)
from db.tables import utc_time


class AdvisorSchedule(SQLModel, table=True):
    """When the advisor next reads a READY CloudSpace, who holds it meanwhile (a lease,
    as for the reconciler), and how its last run went. Made when the advisor first sees
    the CloudSpace READY; gone with the CloudSpace."""

    __tablename__ = "advisor_schedules"
    __table_args__ = (sa.Index("ix_advisor_schedules_due", "next_run_at"),)

    cloud_space_id: str = Field(primary_key=True, foreign_key="cloud_spaces.id", ondelete="CASCADE")
    org_id: str = Field(index=True)
    next_run_at: datetime = utc_time()
    claimed_by: str | None = None
    lease_until: datetime | None = utc_time(nullable=True)
    enabled_at: datetime = utc_time()
    last_run_at: datetime | None = utc_time(nullable=True)
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
    explained_at: datetime | None = utc_time(nullable=True)
    # When the explainer should ask the model (null: explained, or not to be).
    explain_due_at: datetime | None = utc_time(nullable=True)
    explain_attempts: int = 0
    first_seen_at: datetime = utc_time()
    last_seen_at: datetime = utc_time()
    changed_at: datetime = utc_time()
    resolved_at: datetime | None = utc_time(nullable=True)
    dismissed_at: datetime | None = utc_time(nullable=True)
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
    created_at: datetime = utc_time()


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
    at: datetime = utc_time(index=True)
