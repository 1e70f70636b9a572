"""access for real teams: custom roles, the API token lifecycle, the audit log

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

import db.tables

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "role_definitions",
        sa.Column("id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("org_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("policies_json", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("created_at", db.tables.UtcDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["org_id"], ["orgs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("org_id", "name", name="uq_role_definitions_org_name"),
    )
    op.create_index("ix_role_definitions_org_id", "role_definitions", ["org_id"])
    with op.batch_alter_table("api_tokens") as batch_op:
        batch_op.add_column(
            sa.Column("name", sqlmodel.sql.sqltypes.AutoString(), nullable=False, server_default="")
        )
        batch_op.add_column(
            sa.Column("custom_role_id", sqlmodel.sql.sqltypes.AutoString(), nullable=True)
        )
        batch_op.add_column(sa.Column("expires_at", db.tables.UtcDateTime(), nullable=True))
        batch_op.add_column(sa.Column("last_used_at", db.tables.UtcDateTime(), nullable=True))
        batch_op.add_column(sa.Column("revoked_at", db.tables.UtcDateTime(), nullable=True))
        batch_op.create_foreign_key(
            "fk_api_tokens_custom_role_id",
            "role_definitions",
            ["custom_role_id"],
            ["id"],
            ondelete="RESTRICT",
        )
        batch_op.create_index("ix_api_tokens_custom_role_id", ["custom_role_id"])
    with op.batch_alter_table("api_tokens") as batch_op:
        batch_op.alter_column("name", server_default=None)
    op.create_table(
        "audit_events",
        sa.Column("id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("org_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("at", db.tables.UtcDateTime(), nullable=False),
        sa.Column("actor", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("actor_kind", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("action", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("target_ids_json", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("outcome", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("input_json", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("request_id", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.ForeignKeyConstraint(["org_id"], ["orgs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_audit_events_at", "audit_events", ["at"])
    op.create_index("ix_audit_events_org_id_id", "audit_events", ["org_id", "id"])


def downgrade() -> None:
    op.drop_table("audit_events")
    with op.batch_alter_table("api_tokens") as batch_op:
        batch_op.drop_index("ix_api_tokens_custom_role_id")
        batch_op.drop_constraint("fk_api_tokens_custom_role_id", type_="foreignkey")
        for column in ("revoked_at", "last_used_at", "expires_at", "custom_role_id", "name"):
            batch_op.drop_column(column)
    op.drop_table("role_definitions")
