"""one canonical form per name: a name key (NFKC, case-folded) unique per org for custom
roles, cloud accounts, environments and live spaces

Revision ID: 0010
Revises: 0009

Rows written before this revision may already hold two names of one key (`TOKMGR` and
`tokmgr`). They keep their names and keep working: the oldest of each such group gets
the key, the others none (a unique index allows any number of nulls), so from now on no
new name of that key can be added, while the migration never fails on old data.
"""

import unicodedata

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

# (table, whether only rows not deregistered must be unique)
TABLES = (
    ("role_definitions", False),
    ("cloud_accounts", False),
    ("environments", False),
    ("spaces", True),
)
LIVE = "deregistered_at IS NULL"


def name_key(name: str) -> str:
    """core.common.names.name_key as of this revision."""
    return unicodedata.normalize("NFKC", name).casefold()


def _keys(table: str, live_only: bool) -> list[dict[str, str]]:
    """The key of every row, oldest first, except a row whose (org, key) an older live
    row already holds."""
    columns = "id, org_id, name" + (", deregistered_at IS NULL" if live_only else ", 1 = 1")
    rows = op.get_bind().execute(
        sa.text(f"SELECT {columns} FROM {table} ORDER BY created_at, id")
    )
    held: set[tuple[str, str]] = set()
    keys = []
    for row_id, org_id, name, live in rows:
        key = name_key(name)
        if live:
            if (org_id, key) in held:
                continue
            held.add((org_id, key))
        keys.append({"row_id": row_id, "name_key": key})
    return keys


def upgrade() -> None:
    for table, live_only in TABLES:
        op.add_column(table, sa.Column("name_key", sqlmodel.sql.sqltypes.AutoString()))
        keys = _keys(table, live_only)
        if keys:
            op.get_bind().execute(
                sa.text(f"UPDATE {table} SET name_key = :name_key WHERE id = :row_id"),
                keys,
            )
        where = {"sqlite_where": sa.text(LIVE), "postgresql_where": sa.text(LIVE)}
        op.create_index(
            f"uq_{table}_org_name_key" if not live_only else "uq_spaces_live_name_key",
            table,
            ["org_id", "name_key"],
            unique=True,
            **(where if live_only else {}),
        )


def downgrade() -> None:
    for table, live_only in TABLES:
        name = f"uq_{table}_org_name_key" if not live_only else "uq_spaces_live_name_key"
        op.drop_index(name, table_name=table)
        with op.batch_alter_table(table) as batch_op:
            batch_op.drop_column("name_key")
