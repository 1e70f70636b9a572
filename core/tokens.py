"""API tokens: minted once, stored only as a hash, and resolved to a Viewer per request."""

from __future__ import annotations

import hashlib
import re
import secrets

from core import cloudspaces
from core.ids import new_id
from core.rbac import Role, Viewer
from core.services import Services, Unit
from db import orgs as repo
from db import owned
from db.tables import ApiToken, Org

PREFIX = "sdk_"
# The whole header value, matched in full: a token is visible ASCII, so "sdk_…\n" or a
# NUL byte is no token rather than the token before it.
BEARER = re.compile(r"bearer +(?P<token>[\x21-\x7e]+)", re.IGNORECASE)


def token_hash(token: str) -> str:
    # Tokens carry 256 bits of randomness, so a plain SHA-256 is a safe lookup key.
    return hashlib.sha256(token.encode()).hexdigest()


async def create_token(
    unit: Unit, org_name: str, role: Role, services: Services | None = None
) -> tuple[Org, str]:
    """Creates the org if needed (with its default CloudSpace, given the services that
    say where) and a new token for it; the clear token is returned once."""
    org = await repo.org_by_name(unit.session, org_name)
    if org is None:
        org = Org(id=new_id("org"), name=org_name, created_at=unit.now)
        await owned.add(unit.session, org)
        if services is not None:
            await cloudspaces.create_default(unit, services, org)
    token = PREFIX + secrets.token_urlsafe(32)
    await owned.add(
        unit.session,
        ApiToken(
            id=new_id("tok"),
            org_id=org.id,
            role=role.value,
            token_hash=token_hash(token),
            created_at=unit.now,
        ),
    )
    return org, token


async def authenticate(unit: Unit, authorization: str | None) -> Viewer | None:
    """The Viewer for an `Authorization: Bearer <token>` value, or None."""
    bearer = BEARER.fullmatch(authorization.strip(" \t")) if authorization else None
    if bearer is None:
        return None
    found = await repo.token_with_org(unit.session, token_hash(bearer["token"]))
    if found is None:
        return None
    api_token, org = found
    return Viewer(org_id=org.id, org_name=org.name, role=Role(api_token.role))


async def org_admin(unit: Unit, org_name: str) -> Viewer | None:
    """An ADMIN of the org, for operator commands run beside the server; None: no such org."""
    org = await repo.org_by_name(unit.session, org_name)
    return None if org is None else Viewer(org_id=org.id, org_name=org.name, role=Role.ADMIN)
