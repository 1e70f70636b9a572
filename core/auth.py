"""Who is calling: one place turns an `Authorization` value into a Viewer, or says why not.

API tokens (`sdk_…`) are looked up by hash, and a verified one is held in memory for a
moment (core.token_cache, which says why that keeps revocation exact). With SSO configured
(SPACEDOCK_OIDC_ISSUER), any other bearer value is taken as a JWT from that issuer:
its org claim must name an existing org, and its role claim (a string or a list)
picks the first value naming a system or custom role of that org, else VIEWER. A
refusal says what was wrong and never repeats the credential.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from core import roles, tokens
from core.errors import Unauthenticated
from core.rbac import CredentialKind, Role, Viewer
from core.services import Services, utcnow
from db import orgs as org_repo
from providers.oidc import OidcRefused, Sso

__all__ = ["Unauthenticated", "authenticate", "bearer_of"]

# Matched in full: a credential is visible ASCII, so "sdk_…\n" or a NUL byte is no
# credential rather than the one before it (issue 7).
BEARER = re.compile(r"bearer +(?P<credential>[\x21-\x7e]+)", re.IGNORECASE)
NO_CREDENTIAL = "Send Authorization: Bearer <token>; create one with `spacedock token create`."


def bearer_of(authorization: str | None) -> str:
    """The credential of an `Authorization: Bearer …` value; Unauthenticated without one."""
    if not authorization:
        raise Unauthenticated(NO_CREDENTIAL)
    bearer = BEARER.fullmatch(authorization.strip(" \t"))
    if bearer is None:
        raise Unauthenticated("The Authorization header must be `Bearer <token>`.")
    return bearer["credential"]


async def authenticate(services: Services, authorization: str | None) -> Viewer:
    """The caller for an Authorization value; Unauthenticated says why not."""
    credential = bearer_of(authorization)
    if services.sso is not None and not credential.startswith(tokens.PREFIX):
        return await _from_jwt(services, services.sso, credential)
    return await _from_api_token(services, credential)


async def _from_api_token(services: Services, credential: str) -> Viewer:
    """From the cache while it holds the token, else one lookup that reads only (on SQLite
    it never waits for the write lock); the once-a-minute lastUsedAt write, when due, is a
    short unit of its own."""
    cache = services.token_cache
    hashed = tokens.token_hash(credential)
    now = utcnow()
    entry = cache.get(hashed)
    if entry is None:
        ticket = cache.ticket()
        async with services.unit(read_only=True) as unit:
            viewer, last_used_at = await tokens.verify(unit, hashed)
        entry = cache.put(hashed, ticket, viewer, last_used_at)
    elif entry.viewer.expires_at is not None and entry.viewer.expires_at <= now:
        cache.drop(hashed)
        raise Unauthenticated(tokens.expired_message(entry.viewer.expires_at))
    if tokens.last_used_due(entry.last_used_at, now) and entry.viewer.token_id is not None:
        entry.last_used_at = now  # claimed first, so concurrent requests do not write it too
        async with services.unit() as unit:
            await tokens.mark_used(unit, entry.viewer.token_id)
    return entry.viewer


async def _from_jwt(services: Services, sso: Sso, token: str) -> Viewer:
    try:
        claims = await sso.verifier.verify(token)
    except OidcRefused as refused:
        raise Unauthenticated(refused.message) from None
    org_name = claims.get(sso.org_claim)
    if not isinstance(org_name, str) or not org_name:
        raise Unauthenticated(f"The JWT lacks the {sso.org_claim} claim naming an org.")
    async with services.unit(read_only=True) as unit:
        org = await org_repo.org_by_name(unit.session, org_name)
        if org is None:
            raise Unauthenticated(f"The JWT's org {org_name[:100]} is unknown here.")
        role, custom = Role.VIEWER, None
        for name in _role_names(claims.get(sso.role_claim)):
            found = await roles.resolve(unit, org.id, name)
            if found is not None:
                role, custom = found
                break
    return Viewer(
        org_id=org.id,
        org_name=org.name,
        role=role,
        custom_role=custom,
        subject=str(claims["sub"]),
        credential_kind=CredentialKind.OIDC,
        expires_at=datetime.fromtimestamp(int(claims["exp"]), UTC),
    )


def _role_names(claim: Any) -> list[str]:
    if isinstance(claim, str):
        return [claim]
    if isinstance(claim, list):
        return [value for value in claim if isinstance(value, str)]
    return []
