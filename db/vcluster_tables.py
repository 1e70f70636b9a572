"""The vClusters of a CloudSpace (issue 22 item 4): one row per vCluster, each one Helm
release of the vCluster chart in its CloudSpace's host namespace, with its own phase and
its own place in the reconciler's steps. Kept beside db/tables.py (whose CloudSpace they
belong to) to keep each module short; db/migrations/env.py registers both."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

from db.tables import UtcDateTime


class VCluster(SQLModel, table=True):
    """A vCluster: `step` is where the CloudSpace's reconciler stands with it (a
    core.cloudspaces.lifecycle.Step of the vCluster's range, or a removal step), `phase`
    and `message` what it shows. Written only under its CloudSpace's lease, fenced on the
    step read (core.cloudspaces.vcluster_steps)."""

    __tablename__ = "vclusters"
    __table_args__ = (
        sa.UniqueConstraint("cloud_space_id", "name", name="uq_vclusters_cloud_space_name"),
    )

    id: str = Field(primary_key=True)
    cloud_space_id: str = Field(foreign_key="cloud_spaces.id", index=True, ondelete="CASCADE")
    org_id: str = Field(foreign_key="orgs.id", index=True, ondelete="CASCADE")
    name: str
    phase: str = "PENDING"  # a core.spaces.statuses.CloudSpacePhase
    step: str
    message: str | None = None
    created_at: datetime = Field(sa_column=sa.Column(UtcDateTime(), nullable=False))
