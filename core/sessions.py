"""Open WebSockets and the credentials they rest on: a connection lives no longer than
its credential.

The transport opens a session per acknowledged connection with a way to end it. A
check, run every second by the housekeeping loop, ends those whose credential expired
(API token expiry or JWT `exp`, known in memory) or whose API token was revoked (one
query for every token in use on this process, so a revocation by the CLI or another
replica counts too).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime

from core import tokens
from core.rbac import CredentialKind, Viewer
from core.services import Services, utcnow

log = logging.getLogger("spacedock.sessions")

End = Callable[[str], Awaitable[None]]
REVOKED = "API token revoked"
TOKEN_EXPIRED = "API token expired"
JWT_EXPIRED = "JWT expired"


@dataclass(frozen=True)
class Session:
    number: int
    viewer: Viewer
    end: End


def expiry_reason(viewer: Viewer, now: datetime) -> str | None:
    """Why the viewer's credential no longer holds at `now` by its own clock; None: it does."""
    if viewer.expires_at is None or viewer.expires_at > now:
        return None
    return JWT_EXPIRED if viewer.credential_kind is CredentialKind.OIDC else TOKEN_EXPIRED


class Sessions:
    def __init__(self) -> None:
        self._open: dict[int, Session] = {}
        self._numbers = itertools.count()

    def open(self, viewer: Viewer, end: End) -> Session:
        session = Session(next(self._numbers), viewer, end)
        self._open[session.number] = session
        return session

    def close(self, session: Session) -> None:
        self._open.pop(session.number, None)

    def __len__(self) -> int:
        return len(self._open)

    async def check(self, services: Services) -> int:
        """Ends every session whose credential no longer holds; how many ended."""
        sessions = list(self._open.values())
        if not sessions:
            return 0
        now = utcnow()
        ending = {s.number: reason for s in sessions if (reason := expiry_reason(s.viewer, now))}
        token_ids = sorted(
            {s.viewer.token_id for s in sessions if s.viewer.token_id and s.number not in ending}
        )
        if token_ids:
            async with services.unit(read_only=True) as unit:
                valid = await tokens.still_valid(unit, token_ids)
            for session in sessions:
                token_id = session.viewer.token_id
                if token_id is not None and token_id not in valid and session.number not in ending:
                    ending[session.number] = REVOKED
        for number, reason in ending.items():
            if number not in self._open:
                continue
            session = self._open.pop(number)
            try:
                await session.end(reason)
            except Exception as error:  # a socket already gone; the others still end
                log.info("ending a WebSocket (%s) failed: %s", reason, type(error).__name__)
        return len(ending)
