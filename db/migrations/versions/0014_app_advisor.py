"""the App Advisor: schedules, findings, exemptions and the batches of changes adviceChanged streams

Revision ID: 0014
Revises: 0015
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

import db.tables

revision = '0014'
down_revision = '0015'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('advice_events',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('org_id', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('cloud_space_id', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('changes_json', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('at', db.tables.UtcDateTime(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('advice_events', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_advice_events_at'), ['at'], unique=False)
        batch_op.create_index('ix_advice_events_cloud_space', ['cloud_space_id', 'id'], unique=False)
        batch_op.create_index(batch_op.f('ix_advice_events_org_id'), ['org_id'], unique=False)

    op.create_table('advisor_exemptions',
    sa.Column('cloud_space_id', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('rule_id', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('org_id', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('reason', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('created_by', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('created_at', db.tables.UtcDateTime(), nullable=False),
    sa.ForeignKeyConstraint(['cloud_space_id'], ['cloud_spaces.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('cloud_space_id', 'rule_id')
    )
    with op.batch_alter_table('advisor_exemptions', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_advisor_exemptions_org_id'), ['org_id'], unique=False)

    op.create_table('advisor_findings',
    sa.Column('id', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('org_id', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('cloud_space_id', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('fingerprint', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('rule_id', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('family', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('severity', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('severity_order', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('kind', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('namespace', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('name', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('app_id', sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.Column('title', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('evidence_json', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('suggestion', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('patch', sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.Column('names_json', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('content_digest', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('explanation', sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.Column('explained_at', db.tables.UtcDateTime(), nullable=True),
    sa.Column('explain_due_at', db.tables.UtcDateTime(), nullable=True),
    sa.Column('explain_attempts', sa.Integer(), nullable=False),
    sa.Column('first_seen_at', db.tables.UtcDateTime(), nullable=False),
    sa.Column('last_seen_at', db.tables.UtcDateTime(), nullable=False),
    sa.Column('changed_at', db.tables.UtcDateTime(), nullable=False),
    sa.Column('resolved_at', db.tables.UtcDateTime(), nullable=True),
    sa.Column('dismissed_at', db.tables.UtcDateTime(), nullable=True),
    sa.Column('dismiss_reason', sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.Column('dismissed_by', sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.ForeignKeyConstraint(['cloud_space_id'], ['cloud_spaces.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['org_id'], ['orgs.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('cloud_space_id', 'fingerprint', name='uq_advisor_findings_fingerprint')
    )
    with op.batch_alter_table('advisor_findings', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_advisor_findings_app_id'), ['app_id'], unique=False)
        batch_op.create_index('ix_advisor_findings_explain_due', ['explain_due_at'], unique=False)
        batch_op.create_index('ix_advisor_findings_list', ['cloud_space_id', 'severity_order', 'id'], unique=False)
        batch_op.create_index(batch_op.f('ix_advisor_findings_org_id'), ['org_id'], unique=False)

    op.create_table('advisor_schedules',
    sa.Column('cloud_space_id', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('org_id', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('next_run_at', db.tables.UtcDateTime(), nullable=False),
    sa.Column('claimed_by', sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.Column('lease_until', db.tables.UtcDateTime(), nullable=True),
    sa.Column('enabled_at', db.tables.UtcDateTime(), nullable=False),
    sa.Column('last_run_at', db.tables.UtcDateTime(), nullable=True),
    sa.Column('last_error', sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.Column('failures', sa.Integer(), nullable=False),
    sa.Column('objects_read', sa.Integer(), nullable=True),
    sa.Column('truncated', sa.Boolean(), nullable=False),
    sa.ForeignKeyConstraint(['cloud_space_id'], ['cloud_spaces.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('cloud_space_id')
    )
    with op.batch_alter_table('advisor_schedules', schema=None) as batch_op:
        batch_op.create_index('ix_advisor_schedules_due', ['next_run_at'], unique=False)
        batch_op.create_index(batch_op.f('ix_advisor_schedules_org_id'), ['org_id'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('advisor_schedules', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_advisor_schedules_org_id'))
        batch_op.drop_index('ix_advisor_schedules_due')

    op.drop_table('advisor_schedules')
    with op.batch_alter_table('advisor_findings', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_advisor_findings_org_id'))
        batch_op.drop_index('ix_advisor_findings_list')
        batch_op.drop_index('ix_advisor_findings_explain_due')
        batch_op.drop_index(batch_op.f('ix_advisor_findings_app_id'))

    op.drop_table('advisor_findings')
    with op.batch_alter_table('advisor_exemptions', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_advisor_exemptions_org_id'))

    op.drop_table('advisor_exemptions')
    with op.batch_alter_table('advice_events', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_advice_events_org_id'))
        batch_op.drop_index('ix_advice_events_cloud_space')
        batch_op.drop_index(batch_op.f('ix_advice_events_at'))

    op.drop_table('advice_events')
