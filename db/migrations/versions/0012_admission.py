"""strict quota at admission: each vCluster's webhook secret and observed usage, the pods
admitted but not yet observed, and the pod shape of admitted workloads (for `scale`)

Revision ID: 0012
Revises: 0013
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

import db.tables

revision = "0012"
down_revision = "0013"
branch_labels = None
depends_on = None


def _names() -> list[sa.Column[str]]:
    return [
        sa.Column("cloud_space_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("vcluster", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    ]


def _usage(cpu: str, memory: str) -> list[sa.Column[int]]:
    return [
        sa.Column(cpu, sa.BigInteger(), nullable=False),
        sa.Column(memory, sa.BigInteger(), nullable=False),
    ]


def _owned() -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(["cloud_space_id"], ["cloud_spaces.id"], ondelete="CASCADE")


def upgrade() -> None:
    op.create_table(
        "admission_keys",
        *_names(),
        sa.Column("secret_sealed", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("secret_sha256", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        *_usage("observed_cpu_m", "observed_memory_bytes"),
        sa.Column("observed_at", db.tables.UtcDateTime(), nullable=True),
        _owned(),
        sa.PrimaryKeyConstraint("cloud_space_id", "vcluster"),
    )
    op.create_table(
        "quota_reservations",
        sa.Column("id", sa.Integer(), nullable=False),
        *_names(),
        sa.Column("namespace", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        *_usage("cpu_m", "memory_bytes"),
        sa.Column("made_at", db.tables.UtcDateTime(), nullable=False),
        _owned(),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint(
            "cloud_space_id", "vcluster", "namespace", "name", name="uq_quota_reservations_pod"
        ),
    )
    op.create_table(
        "workload_shapes",
        *_names(),
        sa.Column("resource", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("namespace", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        *_usage("cpu_m", "memory_bytes"),
        _owned(),
        sa.PrimaryKeyConstraint("cloud_space_id", "vcluster", "resource", "namespace", "name"),
    )


def downgrade() -> None:
    op.drop_table("workload_shapes")
    op.drop_table("quota_reservations")
    op.drop_table("admission_keys")
