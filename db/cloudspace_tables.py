"""CloudSpaces' tables (issue 9): each tenant's vCluster on a host space with where its
reconciler stands, and the changes of its phase. Beside db/tables.py, whose spaces host
them."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

from db.tables import utc_time


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
    next_attempt_at: datetime = utc_time()
    claimed_by: str | None = None
    lease_until: datetime | None = utc_time(nullable=True)
    created_at: datetime = utc_time()


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
    at: datetime = utc_time()
