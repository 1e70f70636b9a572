"""cloud spaces: the CloudSpace rows the reconciler drives, and their phase history

Revision ID: 0005
Revises: 0001
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

import db.tables

revision = '0005'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('cloud_spaces',
    sa.Column('id', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('org_id', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('name', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('host_space_id', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('cpu', sa.Float(), nullable=False),
    sa.Column('memory_mib', sa.Integer(), nullable=False),
    sa.Column('is_default', sa.Boolean(), nullable=False),
    sa.Column('phase', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('step', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('message', sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.Column('failures', sa.Integer(), nullable=False),
    sa.Column('usage_cpu', sa.Float(), nullable=True),
    sa.Column('usage_memory_mib', sa.Integer(), nullable=True),
    sa.Column('next_attempt_at', db.tables.UtcDateTime(), nullable=False),
    sa.Column('claimed_by', sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.Column('lease_until', db.tables.UtcDateTime(), nullable=True),
    sa.Column('created_at', db.tables.UtcDateTime(), nullable=False),
    sa.ForeignKeyConstraint(['host_space_id'], ['spaces.id'], ),
    sa.ForeignKeyConstraint(['org_id'], ['orgs.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('org_id', 'name', name='uq_cloud_spaces_org_name')
    )
    with op.batch_alter_table('cloud_spaces', schema=None) as batch_op:
        batch_op.create_index('ix_cloud_spaces_due', ['next_attempt_at'], unique=False)
        batch_op.create_index(batch_op.f('ix_cloud_spaces_host_space_id'), ['host_space_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_cloud_spaces_org_id'), ['org_id'], unique=False)

    op.create_table('cloud_space_events',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('cloud_space_id', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('org_id', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('previous', sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.Column('phase', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('message', sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.Column('at', db.tables.UtcDateTime(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('cloud_space_events', schema=None) as batch_op:
        batch_op.create_index('ix_cloud_space_events_cloud_space', ['cloud_space_id', 'id'], unique=False)
        batch_op.create_index(batch_op.f('ix_cloud_space_events_org_id'), ['org_id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('cloud_space_events', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_cloud_space_events_org_id'))
        batch_op.drop_index('ix_cloud_space_events_cloud_space')

    op.drop_table('cloud_space_events')
    with op.batch_alter_table('cloud_spaces', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_cloud_spaces_org_id'))
        batch_op.drop_index(batch_op.f('ix_cloud_spaces_host_space_id'))
        batch_op.drop_index('ix_cloud_spaces_due')

    op.drop_table('cloud_spaces')
