"""the server gives every org its default CloudSpace: when it did (orgs.default_cloud_space_at),
and at most one default CloudSpace per org

Revision ID: 0016
Revises: 0014

An org that already holds a default CloudSpace (made by `spacedock token create` before
this revision) is marked as served, so the server never makes it a second one. An org
without one is left unmarked: the server makes its default once the host is configured.
"""

import sqlalchemy as sa
from alembic import op

import db.tables

revision = "0016"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("orgs") as batch_op:
        batch_op.add_column(
            sa.Column("default_cloud_space_at", db.tables.UtcDateTime(), nullable=True)
        )
    op.execute(
        "UPDATE orgs SET default_cloud_space_at = ("
        " SELECT min(created_at) FROM cloud_spaces"
        " WHERE cloud_spaces.org_id = orgs.id AND cloud_spaces.is_default)"
        " WHERE EXISTS (SELECT 1 FROM cloud_spaces"
        " WHERE cloud_spaces.org_id = orgs.id AND cloud_spaces.is_default)"
    )
    op.create_index(
        "uq_cloud_spaces_one_default",
        "cloud_spaces",
        ["org_id"],
        unique=True,
        sqlite_where=sa.text("is_default"),
        postgresql_where=sa.text("is_default"),
    )


def downgrade() -> None:
    op.drop_index("uq_cloud_spaces_one_default", table_name="cloud_spaces")
    with op.batch_alter_table("orgs") as batch_op:
        batch_op.drop_column("default_cloud_space_at")
