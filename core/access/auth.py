"""Who is calling: one place turns an `Authorization` value into a Viewer, or says why not.

API tokens (`sdk_…`) are looked up by hash, and a verified one is held in memory for a
moment (core.common.token_cache, which says why that keeps revocation exact). With SSO configured
(SPACEDOCK_OIDC_ISSUER), any other bearer value is taken as a JWT from that issuer:
its org claim must name an existing org, and its role claim (a string or a list)
picks the first value naming a system or custom role of that org, else VIEWER. The sub,
org and role values must be visible text of at most 255 characters (at most 100 role
values). A refusal says what was wrong and never repeats the credential.
"""

from __future__ import annotations

import re
import unicodedata
from datetime import UTC, datetime
from typing import Any

from core.access import roles, tokens
from core.common.errors import Unauthenticated
from core.common.rbac import CredentialKind, Role, Viewer
from core.common.services import Services, utcnow
from db import orgs as org_repo
from providers.oidc import OidcRefused, Sso

__all__ = ["Unauthenticated", "authenticate", "bearer_of"]

# Matched in full: a credential is visible ASCII, so "sdk_…\n" or a NUL byte is no
# credential rather than the one before it (issue 7).
BEARER = re.compile(r"bearer +(?P<credential>[\x21-\x7e]+)", re.IGNORECASE)
NO_CREDENTIAL = "Send Authorization: Bearer <token>; create one with `spacedock token create`."
# What a JWT's sub, org and role values may be: an email address or an id fits many times.
MAX_CLAIM_CHARACTERS = 255
MAX_ROLE_VALUES = 100
# Control, format (bidi overrides, zero-width), surrogate and line/paragraph separators.
UNPRINTABLE = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


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
    if not credential.startswith(tokens.PREFIX):
        if services.sso is not None:
            return await _from_jwt(services, services.sso, credential)
        if credential.count(".") == 2:
            raise Unauthenticated(
                "This looks like a JWT, but SSO is not configured here "
                "(SPACEDOCK_OIDC_ISSUER): send an API token (sdk_…)."
            )
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
    subject = _claim_text(claims["sub"], "sub")
    org_name = claims.get(sso.org_claim)
    if not isinstance(org_name, str) or not org_name:
        raise Unauthenticated(f"The JWT lacks the {sso.org_claim} claim naming an org.")
    _claim_text(org_name, sso.org_claim)
    role_names = _role_names(claims.get(sso.role_claim), sso.role_claim)
    async with services.unit(read_only=True) as unit:
        org = await org_repo.org_by_name(unit.session, org_name)
        if org is None:
            raise Unauthenticated(f"The JWT's org {org_name[:100]} is unknown here.")
        role, custom = Role.VIEWER, None
        for name in role_names:
            found = await roles.resolve(unit, org.id, name)
            if found is not None:
                role, custom = found
                break
    return Viewer(
        org_id=org.id,
        org_name=org.name,
        role=role,
        custom_role=custom,
        subject=subject,
        credential_kind=CredentialKind.OIDC,
        expires_at=datetime.fromtimestamp(int(claims["exp"]), UTC),
    )


def _claim_text(value: object, claim: str) -> str:
    """A claim that names someone or something: a string of visible text, not too long.
    A NUL cannot be stored (Postgres), and control or format characters would forge log
    and audit lines; the refusal names the claim, never its value."""
    if not isinstance(value, str) or not value:
        raise Unauthenticated(f"The JWT's {claim} claim must be a non-empty string.")
    if len(value) > MAX_CLAIM_CHARACTERS:
        raise Unauthenticated(
            f"The JWT's {claim} claim is longer than {MAX_CLAIM_CHARACTERS} characters."
        )
    if any(unicodedata.category(c) in UNPRINTABLE for c in value):
        raise Unauthenticated(
            f"The JWT's {claim} claim contains control or invisible formatting characters."
        )
    return value


def _role_names(claim: Any, name: str) -> list[str]:
    """The role claim's values in order (a string or a list; other values are no role)."""
    if isinstance(claim, str):
        return [_claim_text(claim, name)]
    if not isinstance(claim, list):
        return []
    if len(claim) > MAX_ROLE_VALUES:
        raise Unauthenticated(f"The JWT's {name} claim has more than {MAX_ROLE_VALUES} values.")
    return [_claim_text(value, name) for value in claim if isinstance(value, str)]
