"""frontend API: a search index on space names, reason codes beside reason words

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

# What the words of rows written before codes existed mean (core.spaces.reasons.FAILURE_WORDS).
FAILURE_CODES = """
    CASE
      WHEN {c} LIKE 'cluster access revoked%' THEN 'ACCESS_REVOKED'
      WHEN {c} LIKE 'DNS%' THEN 'DNS'
      WHEN {c} LIKE 'connection %' THEN 'CONNECTION_REFUSED'
      WHEN {c} LIKE 'TLS%' THEN 'TLS'
      WHEN {c} LIKE '401%' THEN 'UNAUTHORIZED'
      WHEN {c} LIKE '403%' THEN 'FORBIDDEN'
      WHEN {c} LIKE 'timeout%' THEN 'TIMEOUT'
      WHEN {c} LIKE 'HTTP 200%' THEN 'BAD_RESPONSE'
      WHEN {c} LIKE 'HTTP %' THEN 'HTTP_ERROR'
      ELSE 'CONNECTION_REFUSED'
    END"""
EVENT_CODES = """
    CASE
      WHEN reason = 'registered' THEN 'REGISTERED'
      WHEN reason = 'operator hold' THEN 'OPERATOR_HOLD'
      WHEN reason = 'hold lifted' THEN 'HOLD_LIFTED'
      WHEN reason LIKE 'probe ok%' THEN 'PROBE_OK'
      ELSE {failures}
    END"""


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    op.create_index(
        "ix_spaces_name_search",
        "spaces",
        ["name"],
        postgresql_using="gin",
        postgresql_ops={"name": "gin_trgm_ops"},
    )
    op.add_column("spaces", sa.Column("last_probe_error_code", sqlmodel.sql.sqltypes.AutoString(), nullable=True))
    op.add_column(
        "space_status_events", sa.Column("reason_code", sqlmodel.sql.sqltypes.AutoString(), nullable=True)
    )
    op.execute(
        "UPDATE spaces SET last_probe_error_code = "
        + FAILURE_CODES.format(c="last_probe_error")
        + " WHERE last_probe_error IS NOT NULL"
    )
    # Old failure reasons read "N consecutive failures: <words>".
    failures = FAILURE_CODES.format(c="substr(reason, instr(reason, ': ') + 2)")
    if op.get_bind().dialect.name == "postgresql":
        failures = FAILURE_CODES.format(c="substr(reason, strpos(reason, ': ') + 2)")
    op.execute(
        "UPDATE space_status_events SET reason_code = " + EVENT_CODES.format(failures=failures)
    )


def downgrade() -> None:
    op.drop_column("space_status_events", "reason_code")
    op.drop_column("spaces", "last_probe_error_code")
    op.drop_index("ix_spaces_name_search", table_name="spaces")
