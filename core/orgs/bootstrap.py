"""An org's start: created on first use (with its default CloudSpace when this process knows
the host), then its first token.

Creating an org touches two domains, access (the token) and CloudSpaces (the default
CloudSpace on the platform's host space), so it lives above both rather than in
either; `spacedock token create` and the test servers create orgs through here.
"""

from __future__ import annotations

from core.access import audit, tokens
from core.cloudspaces import defaults as default_cloudspaces
from core.common.ids import new_id
from core.common.services import Services, Unit
from db import orgs as org_rows
from db import owned
from db.tables import Org


async def org_named(unit: Unit, name: str, services: Services | None = None) -> Org:
    """The org of that name, created if needed; a new org gets its default CloudSpace at
    once when `services` say where (SPACEDOCK_DEFAULT_HOST_SPACE), else from the server
    (core.cloudspaces.defaults)."""
    org = await org_rows.org_by_name(unit.session, name)
    if org is None:
        org = Org(id=new_id("org"), name=name, created_at=unit.now)
        await owned.add(unit.session, org)
        if services is not None:
            await default_cloudspaces.ensure(unit, services, org)
    return org


async def create_token(
    unit: Unit,
    org_name: str,
    role: str,
    services: Services | None = None,
    name: str | None = None,
    expires_in_days: int | None = None,
    os_user: str | None = None,
) -> tuple[Org, str]:
    """For operators (`spacedock token create`): creates the org if needed (`org_named`)
    and a new token for it (core.access.tokens.create_for_operator), audited as
    createApiToken by `os_user` when given (test servers mint without). The clear token
    is returned once; UserErrors for a bad role, name or lifetime."""
    org = await org_named(unit, org_name, services)
    minted = await tokens.create_for_operator(unit, org, role, name, expires_in_days)
    if os_user is not None:
        recorded = {"name": minted.row.name, "role": role, "expiresInDays": expires_in_days}
        await audit.record_operator_call(
            unit, tokens.operator_of(org, os_user), "createApiToken", recorded, [minted.row.id]
        )
    return org, minted.secret
