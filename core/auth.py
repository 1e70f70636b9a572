"""Who is calling: one place turns an `Authorization` value into a Viewer, or says why not.

API tokens (`sdk_…`) are looked up by hash; with SSO configured, any other bearer
value is taken as a JWT from the OIDC issuer. A refusal says what was wrong and
never repeats the credential.
"""

from __future__ import annotations

import re

from core import tokens
from core.errors import Unauthenticated
from core.rbac import Viewer
from core.services import Services

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
    """The caller for an Authorization value; Unauthenticated says why not.

    The lookup reads only (on SQLite it never waits for the write lock); the once-a-minute
    lastUsedAt write, when due, is a short unit of its own."""
    credential = bearer_of(authorization)
    async with services.unit(read_only=True) as unit:
        viewer, used_long_ago = await tokens.authenticate_token(unit, credential)
    if used_long_ago and viewer.token_id is not None:
        async with services.unit() as unit:
            await tokens.mark_used(unit, viewer.token_id)
    return viewer
