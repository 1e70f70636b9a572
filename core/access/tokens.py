"""API tokens: minted once, stored only as a hash, resolved to a Viewer per request,
and ended by expiry or revocation.

`lastUsedAt` is written at most once a minute per token, so a busy client costs
one small write a minute, not one per request.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from core.access import audit, roles
from core.common.errors import Problems, Unauthenticated, UserErrors
from core.common.ids import new_id
from core.common.rbac import CredentialKind, CustomRole, Role, Viewer
from core.common.services import Unit
from db import orgs as org_rows
from db import owned
from db.access_tables import ApiToken
from db.tables import Org

PREFIX = "sdk_"
MANAGE = "token:manage"
MAX_NAME = 100
MAX_DAYS = 3650
LAST_USED_EVERY = timedelta(minutes=1)


def token_hash(token: str) -> str:
    # Tokens carry 256 bits of randomness, so a plain SHA-256 is a safe lookup key.
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class Minted:
    """A new token's row, its role, and the clear secret (shown once)."""

    row: ApiToken
    role: roles.RoleView
    secret: str


async def _mint(
    unit: Unit,
    org_id: str,
    name: str,
    role: Role,
    custom: CustomRole | None,
    expires_in_days: int | None,
) -> Minted:
    secret = PREFIX + secrets.token_urlsafe(32)
    row = ApiToken(
        id=new_id("tok"),
        org_id=org_id,
        name=name,
        role=role.value,
        custom_role_id=None if custom is None else custom.id,
        token_hash=token_hash(secret),
        created_at=unit.now,
        expires_at=None if expires_in_days is None else unit.now + timedelta(days=expires_in_days),
    )
    await owned.add(unit.session, row)
    return Minted(row, roles.view_for(role, custom), secret)


def _check_name_and_days(problems: Problems, name: str, expires_in_days: int | None) -> None:
    if not name.strip() or len(name) > MAX_NAME:
        problems.add(("name",), f"A token name is 1 to {MAX_NAME} characters.")
    if expires_in_days is not None and not 1 <= expires_in_days <= MAX_DAYS:
        problems.add(("expiresInDays",), f"expiresInDays is 1 to {MAX_DAYS}, or null: no expiry.")


async def create_for_operator(
    unit: Unit, org: Org, role: str, name: str | None = None, expires_in_days: int | None = None
) -> Minted:
    """For operators (`spacedock token create`, through core.orgs.bootstrap): a new token
    of `org`; `role` is a system role's name or a custom role's name or id. UserErrors for
    a bad role, name or lifetime."""
    problems = Problems()
    resolved = await roles.resolve(unit, org.id, role)
    if resolved is None:
        problems.add(("role",), f"The org {org.name} has no role {role}.", "NOT_FOUND")
    token_name = name if name is not None else f"{role.lower()}-{unit.now:%Y%m%d%H%M%S}"
    _check_name_and_days(problems, token_name, expires_in_days)
    problems.raise_if_any()
    assert resolved is not None
    return await _mint(unit, org.id, token_name.strip(), *resolved, expires_in_days)


async def create(
    unit: Unit, viewer: Viewer, name: str, role: str, expires_in_days: int | None
) -> Minted:
    """createApiToken: a token of the caller's org, of a role within the caller's own
    policies (core.access.roles); the secret is in the result once."""
    viewer.require(MANAGE)
    problems = Problems("input")
    resolved = await roles.resolve(unit, viewer.org_id, role)
    if resolved is None or (resolved[1] is not None and resolved[1].id != role):
        problems.add(
            ("role",),
            "Give a system role's name (ADMIN, EDITOR, VIEWER) or a custom role's id.",
            "NOT_FOUND",
        )
    _check_name_and_days(problems, name, expires_in_days)
    problems.raise_if_any()
    assert resolved is not None
    roles.require_within(viewer, roles.view_for(*resolved), ("input", "role"), "Minting a token")
    return await _mint(unit, viewer.org_id, name.strip(), *resolved, expires_in_days)


async def revoke(unit: Unit, viewer: Viewer, token_id: str) -> ApiToken:
    """Revoking twice keeps the first revocation's time. Only a token whose role is within
    the caller's own policies may be revoked (core.access.roles)."""
    viewer.require(MANAGE)
    row = await owned.by_id(unit.session, ApiToken, viewer.org_id, token_id)
    if row is None:
        raise UserErrors.one(("input", "id"), "No such API token.", "NOT_FOUND")
    if row.revoked_at is None:
        held = await roles.resolve(unit, viewer.org_id, row.custom_role_id or row.role)
        assert held is not None, "a role in use by a token is never deleted"
        roles.require_within(viewer, roles.view_for(*held), ("input", "id"), "Revoking a token")
        row.revoked_at = unit.now
        await owned.add(unit.session, row)
        unit.credentials_changed = True
    return row


async def list_tokens(unit: Unit, org_name: str) -> tuple[Org, list[ApiToken]] | None:
    """For operators (`spacedock token list`): every token of the org, revoked ones too."""
    org = await org_rows.org_by_name(unit.session, org_name)
    if org is None:
        return None
    page = await org_rows.tokens_page(unit.session, org.id, True, 10_000, None)
    return org, list(page.items)


async def revoke_by_operator(
    unit: Unit, org_name: str, token_id: str, os_user: str
) -> ApiToken | None:
    """For operators (`spacedock token revoke`), audited as revokeApiToken by the OS user;
    None: no such token in that org."""
    operator = await org_admin(unit, org_name, os_user)
    if operator is None:
        return None
    try:
        row = await revoke(unit, operator, token_id)
    except UserErrors:
        return None
    await audit.record_operator_call(unit, operator, "revokeApiToken", {"id": row.id}, [row.id])
    return row


def expired_message(expires_at: datetime) -> str:
    return f"This API token expired at {expires_at:%Y-%m-%dT%H:%M:%SZ}."


def last_used_due(last_used_at: datetime | None, now: datetime) -> bool:
    """Whether lastUsedAt is due a write: never written, or a minute has passed."""
    return last_used_at is None or now - last_used_at >= LAST_USED_EVERY


async def verify(unit: Unit, hashed: str) -> tuple[Viewer, datetime | None]:
    """The Viewer for the API token with this hash (`token_hash`), and its lastUsedAt;
    Unauthenticated when it is unknown, revoked or expired."""
    found = await org_rows.token_with_org(unit.session, hashed)
    if found is None:
        raise Unauthenticated("Unknown API token.")
    row, org, custom_row = found
    if row.revoked_at is not None:
        raise Unauthenticated(f"This API token was revoked at {row.revoked_at:%Y-%m-%dT%H:%M:%SZ}.")
    if row.expires_at is not None and row.expires_at <= unit.now:
        raise Unauthenticated(expired_message(row.expires_at))
    viewer = Viewer(
        org_id=org.id,
        org_name=org.name,
        role=Role(row.role),
        custom_role=None if custom_row is None else roles.custom_of(custom_row),
        subject=row.name,
        credential_kind=CredentialKind.API_TOKEN,
        token_id=row.id,
        expires_at=row.expires_at,
    )
    return viewer, row.last_used_at


async def mark_used(unit: Unit, token_id: str) -> None:
    await org_rows.mark_token_used(unit.session, token_id, unit.now)


async def still_valid(unit: Unit, token_ids: list[str]) -> set[str]:
    """Which of these tokens are still usable (not revoked, not expired): one query."""
    states = await org_rows.token_states(unit.session, token_ids) if token_ids else {}
    return {
        token_id
        for token_id, (revoked_at, expires_at) in states.items()
        if revoked_at is None and (expires_at is None or expires_at > unit.now)
    }


async def org_admin(unit: Unit, org_name: str, os_user: str) -> Viewer | None:
    """An ADMIN of the org, for operator commands run beside the server by `os_user` (the
    actor of their audit events); None: no such org."""
    org = await org_rows.org_by_name(unit.session, org_name)
    return None if org is None else operator_of(org, os_user)


def operator_of(org: Org, os_user: str) -> Viewer:
    return Viewer(
        org_id=org.id,
        org_name=org.name,
        role=Role.ADMIN,
        subject=os_user,
        credential_kind=CredentialKind.OS_USER,
    )
