"""Alembic environment: runs on the connection `db.engine.Database.migrate` hands over."""

from alembic import context
from sqlmodel import SQLModel

import db.admission_tables  # strict quota's tables, kept apart for length
import db.tables
import db.vcluster_tables  # noqa: F401  (a CloudSpace's vClusters, kept apart for length)

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=SQLModel.metadata,
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
