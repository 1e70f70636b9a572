"""GENERIC spaces: the identity key keeps the server URL's case (paths are case-sensitive)
and counts `localhost` as 127.0.0.1 (core.spaces.cluster_endpoints.server_identity)

Revision ID: 0008
Revises: 0007

Keys were "GENERIC/" + the canonical server URL in lower case. The stored server URLs
are canonical already (host in lower case), so the new key is the stored URL with
`https://localhost` read as `https://127.0.0.1`. Where two live spaces of one org
now have the same key (one registered at localhost, one at 127.0.0.1), the space
registered first takes it and the other gets a key of its own: it stays registered,
and new registrations of that server are a CONFLICT with the first.
"""

import json
from collections.abc import Callable

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

LOCALHOST = "https://localhost"


def _identity(server: str) -> str:
    if server == LOCALHOST or server.startswith((f"{LOCALHOST}:", f"{LOCALHOST}/")):
        server = "https://127.0.0.1" + server[len(LOCALHOST) :]
    return f"GENERIC/{server}"


def _old_identity(server: str) -> str:
    return f"GENERIC/{server.lower()}"


def _rekey(identity: Callable[[str], str]) -> None:
    """Gives every GENERIC space the key `identity` makes of its server. Where live spaces
    of one org would share a key, the one registered first takes it and each other gets
    a key of its own that no registration makes ("GENERIC/duplicate/<id>")."""
    bind = op.get_bind()
    rows = bind.execute(
        sa.text(
            "SELECT id, org_id, config_json, identity_key, deregistered_at IS NULL AS live "
            "FROM spaces WHERE provider = 'GENERIC' ORDER BY created_at, id"
        )
    ).all()
    taken: set[tuple[str, str]] = set()
    changed: dict[str, str] = {}
    for row in rows:
        server = json.loads(row.config_json).get("server")
        key = identity(server) if isinstance(server, str) else row.identity_key
        if row.live:
            if (row.org_id, key) in taken:
                key = f"GENERIC/duplicate/{row.id}"
            taken.add((row.org_id, key))
        if key != row.identity_key:
            changed[row.id] = key
    update = sa.text("UPDATE spaces SET identity_key = :key WHERE id = :id")
    # Through a unique placeholder first, so no intermediate state repeats a live key.
    for space_id in changed:
        bind.execute(update, {"id": space_id, "key": f"migrating/{space_id}"})
    for space_id, key in changed.items():
        bind.execute(update, {"id": space_id, "key": key})


def upgrade() -> None:
    _rekey(_identity)


def downgrade() -> None:
    _rekey(_old_identity)
