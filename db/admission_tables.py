"""Strict quota's tables (issue 22): each vCluster's webhook key and observed usage, the
pods admitted and not yet observed, and admitted workloads' pod shapes. Beside
db/cloudspace_tables.py, whose CloudSpaces they belong to."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

import db.cloudspace_tables  # noqa: F401  (cloud_spaces, which their foreign keys name)
from db.tables import utc_time


def _big(primary_key: bool = False) -> int:
    return Field(sa_column=sa.Column(sa.BigInteger(), nullable=False, primary_key=primary_key))  # type: ignore[no-any-return]


class AdmissionKey(SQLModel, table=True):
    """A vCluster's admission webhook: the secret its URL carries (sealed, and its SHA-256
    to compare with), and the usage its pods were last seen to request."""

    __tablename__ = "admission_keys"

    cloud_space_id: str = Field(foreign_key="cloud_spaces.id", primary_key=True, ondelete="CASCADE")
    vcluster: str = Field(primary_key=True)
    secret_sealed: str
    secret_sha256: str
    observed_cpu_m: int = _big()
    observed_memory_bytes: int = _big()
    # When the pod list behind observed_* was asked for; None: never observed.
    observed_at: datetime | None = utc_time(nullable=True)


class QuotaReservation(SQLModel, table=True):
    """A pod admitted by the webhook and not yet seen in its vCluster's pod list."""

    __tablename__ = "quota_reservations"
    __table_args__ = (
        sa.UniqueConstraint(
            "cloud_space_id", "vcluster", "namespace", "name", name="uq_quota_reservations_pod"
        ),
    )

    id: int | None = Field(default=None, primary_key=True)
    cloud_space_id: str = Field(foreign_key="cloud_spaces.id", ondelete="CASCADE")
    vcluster: str
    namespace: str
    name: str
    cpu_m: int = _big()
    memory_bytes: int = _big()
    made_at: datetime = utc_time()


class WorkloadShape(SQLModel, table=True):
    """What one pod of an admitted workload requests, for its `scale` requests (a Scale
    carries the replicas but not the pod template)."""

    __tablename__ = "workload_shapes"

    cloud_space_id: str = Field(foreign_key="cloud_spaces.id", primary_key=True, ondelete="CASCADE")
    vcluster: str = Field(primary_key=True)
    resource: str = Field(primary_key=True)  # e.g. deployments.apps
    namespace: str = Field(primary_key=True)
    name: str = Field(primary_key=True)
    cpu_m: int = _big()
    memory_bytes: int = _big()
