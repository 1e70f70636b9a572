"""CloudSpaces provisioned from the vCluster chart (issue 22): the raw-template steps
`vcluster-services` and `vcluster-workload` became the one step `vcluster-release`

Revision ID: 0017
Revises: 0016
"""

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        sa.text(
            "UPDATE cloud_spaces SET step = 'vcluster-release' "
            "WHERE step IN ('vcluster-services', 'vcluster-workload')"
        )
    )


def downgrade() -> None:
    op.execute(
        sa.text("UPDATE cloud_spaces SET step = 'vcluster-services' WHERE step = 'vcluster-release'")
    )
