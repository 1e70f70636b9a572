"""Alembic environment: runs on the connection `db.engine.Database.migrate` hands over."""

from alembic import context
from sqlmodel import SQLModel

# Every module of tables, each registering its own on SQLModel.metadata.
import db.access_tables
import db.admission_tables
import db.advisor_tables
import db.app_tables
import db.cloudspace_tables
import db.tables
import db.vcluster_tables  # noqa: F401

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=SQLModel.metadata,
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
