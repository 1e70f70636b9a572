"""the audit log says where each call came from: the API, or an operator's `spacedock`
command (CLI), whose actor is the OS user

Revision ID: 0015
Revises: 0012
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0015"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("audit_events") as batch_op:
        batch_op.add_column(
            sa.Column("via", sqlmodel.sql.sqltypes.AutoString(), nullable=False, server_default="API")
        )


def downgrade() -> None:
    with op.batch_alter_table("audit_events") as batch_op:
        batch_op.drop_column("via")
