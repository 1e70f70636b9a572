"""apps: Git and Helm sources delivered by Flux, their revisions and their history

Revision ID: 0013
Revises: 0010
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

import db.tables

revision = "0013"
down_revision = "0010"
branch_labels = None
depends_on = None

TEXT = sqlmodel.sql.sqltypes.AutoString


def upgrade() -> None:
    op.create_table(
        "apps",
        sa.Column("id", TEXT(), nullable=False),
        sa.Column("org_id", TEXT(), nullable=False),
        sa.Column("name", TEXT(), nullable=False),
        sa.Column("target_key", TEXT(), nullable=False),
        sa.Column("cloud_space_id", TEXT(), nullable=True),
        sa.Column("vcluster", TEXT(), nullable=True),
        sa.Column("environment_id", TEXT(), nullable=True),
        sa.Column("namespace", TEXT(), nullable=False),
        sa.Column("source_kind", TEXT(), nullable=False),
        sa.Column("credential_ciphertext", TEXT(), nullable=True),
        sa.Column("suspended", sa.Boolean(), nullable=False),
        sa.Column("sync_requested_at", db.tables.UtcDateTime(), nullable=True),
        sa.Column("delivered_revision", sa.Integer(), nullable=True),
        sa.Column("delivered_suspended", sa.Boolean(), nullable=False),
        sa.Column("delivered_sync_at", db.tables.UtcDateTime(), nullable=True),
        sa.Column("deleting", sa.Boolean(), nullable=False),
        sa.Column("status", TEXT(), nullable=False),
        sa.Column("status_reason", TEXT(), nullable=True),
        sa.Column("status_message", TEXT(), nullable=True),
        sa.Column("last_applied_revision", TEXT(), nullable=True),
        sa.Column("last_attempted_revision", TEXT(), nullable=True),
        sa.Column("last_handled_sync_at", TEXT(), nullable=True),
        sa.Column("workloads_json", TEXT(), nullable=False),
        sa.Column("status_read_at", db.tables.UtcDateTime(), nullable=True),
        sa.Column("revision_count", sa.Integer(), nullable=False),
        sa.Column("delivery_due_at", db.tables.UtcDateTime(), nullable=True),
        sa.Column("claimed_by", TEXT(), nullable=True),
        sa.Column("lease_until", db.tables.UtcDateTime(), nullable=True),
        sa.Column("status_due_at", db.tables.UtcDateTime(), nullable=False),
        sa.Column("created_at", db.tables.UtcDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["org_id"], ["orgs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("org_id", "target_key", "name", name="uq_apps_target_name"),
    )
    with op.batch_alter_table("apps", schema=None) as batch_op:
        batch_op.create_index("ix_apps_delivery_due", ["delivery_due_at"], unique=False)
        batch_op.create_index("ix_apps_status_due", ["status_due_at"], unique=False)
        batch_op.create_index(batch_op.f("ix_apps_org_id"), ["org_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_apps_cloud_space_id"), ["cloud_space_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_apps_environment_id"), ["environment_id"], unique=False)

    op.create_table(
        "app_revisions",
        sa.Column("id", TEXT(), nullable=False),
        sa.Column("app_id", TEXT(), nullable=False),
        sa.Column("org_id", TEXT(), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("source_json", TEXT(), nullable=False),
        sa.Column("rollback_of", sa.Integer(), nullable=True),
        sa.Column("created_by", TEXT(), nullable=False),
        sa.Column("created_at", db.tables.UtcDateTime(), nullable=False),
        sa.Column("state", TEXT(), nullable=False),
        sa.Column("tries", sa.Integer(), nullable=False),
        sa.Column("reason", TEXT(), nullable=True),
        sa.Column("source_generation", sa.Integer(), nullable=True),
        sa.Column("deploy_generation", sa.Integer(), nullable=True),
        sa.Column("applied_at", db.tables.UtcDateTime(), nullable=True),
        sa.Column("finished_at", db.tables.UtcDateTime(), nullable=True),
        sa.Column("flux_revision", TEXT(), nullable=True),
        sa.ForeignKeyConstraint(["app_id"], ["apps.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("app_id", "number", name="uq_app_revisions_number"),
    )
    with op.batch_alter_table("app_revisions", schema=None) as batch_op:
        batch_op.create_index("ix_app_revisions_app_state", ["app_id", "state"], unique=False)
        batch_op.create_index(batch_op.f("ix_app_revisions_org_id"), ["org_id"], unique=False)

    op.create_table(
        "app_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("app_id", TEXT(), nullable=False),
        sa.Column("org_id", TEXT(), nullable=False),
        sa.Column("cloud_space_id", TEXT(), nullable=True),
        sa.Column("environment_id", TEXT(), nullable=True),
        sa.Column("kind", TEXT(), nullable=False),
        sa.Column("previous_status", TEXT(), nullable=True),
        sa.Column("status", TEXT(), nullable=False),
        sa.Column("reason", TEXT(), nullable=True),
        sa.Column("message", TEXT(), nullable=True),
        sa.Column("revision_id", TEXT(), nullable=True),
        sa.Column("revision_number", sa.Integer(), nullable=True),
        sa.Column("revision_state", TEXT(), nullable=True),
        sa.Column("at", db.tables.UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("app_events", schema=None) as batch_op:
        batch_op.create_index("ix_app_events_app", ["app_id", "id"], unique=False)
        batch_op.create_index(batch_op.f("ix_app_events_org_id"), ["org_id"], unique=False)


def downgrade() -> None:
    op.drop_table("app_events")
    op.drop_table("app_revisions")
    op.drop_table("apps")
