"""several vClusters per CloudSpace: the vclusters table, each existing CloudSpace's first
vCluster (named like it, at its step), and cloud_space_events.vcluster_id

Revision ID: 0018
Revises: 0017

A CloudSpace before this revision had exactly one vCluster, named like it, at the
CloudSpace's own step: that vCluster becomes a row here at the same step (a CloudSpace
still before its vCluster's steps puts it at the first of them), so a READY CloudSpace's
vCluster is READY and keeps its Helm release, kubeconfigs and webhook.
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

import db.tables

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

# The vCluster's own steps (core.cloudspaces.lifecycle.VCLUSTER_STEPS) as stored then.
VCLUSTER_STEPS = (
    "vcluster-release",
    "vcluster-ready",
    "kubeconfig-copy",
    "tenant-account",
    "headroom",
    "flux",
    "flux-ready",
    "refresh",
)


def upgrade() -> None:
    op.create_table(
        "vclusters",
        sa.Column("id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("cloud_space_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("org_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("phase", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("step", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("message", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("created_at", db.tables.UtcDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["cloud_space_id"], ["cloud_spaces.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["org_id"], ["orgs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("cloud_space_id", "name", name="uq_vclusters_cloud_space_name"),
    )
    op.create_index("ix_vclusters_cloud_space_id", "vclusters", ["cloud_space_id"])
    op.create_index("ix_vclusters_org_id", "vclusters", ["org_id"])
    with op.batch_alter_table("cloud_space_events") as batch_op:
        batch_op.add_column(
            sa.Column("vcluster_id", sqlmodel.sql.sqltypes.AutoString(), nullable=True)
        )
    # The first vCluster's id is the CloudSpace's with the vCluster prefix: unique, and
    # made in one statement on both backends.
    steps = ", ".join(f"'{step}'" for step in VCLUSTER_STEPS)
    op.execute(
        "INSERT INTO vclusters (id, cloud_space_id, org_id, name, phase, step, message, created_at)"
        " SELECT 'vc_' || substr(id, 4), id, org_id, name,"
        f" CASE WHEN step IN ({steps}) OR phase = 'DELETING' THEN phase ELSE 'PENDING' END,"
        f" CASE WHEN step IN ({steps}) THEN step ELSE '{VCLUSTER_STEPS[0]}' END,"
        f" CASE WHEN step IN ({steps}) THEN message ELSE NULL END,"
        " created_at FROM cloud_spaces"
    )


def downgrade() -> None:
    with op.batch_alter_table("cloud_space_events") as batch_op:
        batch_op.drop_column("vcluster_id")
    op.drop_index("ix_vclusters_org_id", table_name="vclusters")
    op.drop_index("ix_vclusters_cloud_space_id", table_name="vclusters")
    op.drop_table("vclusters")
