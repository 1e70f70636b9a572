"""Open WebSockets and the credentials they rest on: a connection lives no longer than
its credential, and sends nothing its credential no longer allows.

The transport opens a session per acknowledged connection. A check, run every second by
the housekeeping loop and whenever a delivery needs one, looks every session's
credential up in one read: a session whose API token was revoked, whose credential
expired (token expiry or JWT `exp`, known in memory) or whose custom role was deleted is
stopped (4403 with the reason); one whose custom role now grants other policies is
regranted (its subscriptions admitted under policies it lost end with FORBIDDEN).

Why nothing is delivered after the call that took a right away has returned (issue 18),
the argument of core.common.token_cache applied to sockets:

- A session may send only while the last check that found its credential as held began
  less than `ttl_s` (SPACEDOCK_TOKEN_CACHE_TTL_S) ago, less a margin (`deliverable`);
  a delivery that finds it stale waits for a check first. A frame still waiting for the
  socket when its verification lapses is withdrawn (never written) and sent only after a
  new check (`Connection.withdraw_sends`, from a timer per check).
- In this process, the change rechecks every session before it returns
  (`recheck`, called as the change's unit ends), and stopping or regranting a session
  withdraws its frames not yet written, so none is written after.
- In another process (a replica on Postgres, or `spacedock token revoke` beside the
  server), the change returns only `ttl_s` after its commit (core.common.token_cache), by which
  time every verification begun before the commit has lapsed there, and every later
  check has seen the change.

So no channel between processes is needed, and a delivery costs a clock read.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from core.access import roles, tokens
from core.common.rbac import CredentialKind, CustomRole, Viewer
from core.common.services import Services, utcnow
from core.common.token_cache import DEFAULT_TTL_S, LAPSE_MARGIN_S
from db import owned
from db.access_tables import RoleDefinition

log = logging.getLogger("spacedock.sessions")

REVOKED = "API token revoked"
TOKEN_EXPIRED = "API token expired"
JWT_EXPIRED = "JWT expired"
ROLE_DELETED = "custom role deleted"


class Connection(Protocol):
    """What a session's WebSocket does when its credential changes; each call acts at once
    (what must be sent or closed follows in the background)."""

    def stop(self, reason: str) -> None:
        """Nothing more is sent, frames not yet written are withdrawn, and the socket
        closes with 4403 and the reason."""
        ...

    def regrant(self, viewer: Viewer) -> None:
        """The credential now grants `viewer`'s policies: operations admitted under a
        policy it lost end with FORBIDDEN; new ones run as `viewer`."""
        ...

    def withdraw_sends(self) -> None:
        """Frames not yet written are not written (they are tried again once the session
        is verified anew)."""
        ...


@dataclass(eq=False)
class Session:
    number: int
    viewer: Viewer
    connection: Connection
    # time.monotonic() at the start of the last check that found the credential as held.
    verified_at: float = -math.inf


def expiry_reason(viewer: Viewer, now: datetime) -> str | None:
    """Why the viewer's credential no longer holds at `now` by its own clock; None: it does."""
    if viewer.expires_at is None or viewer.expires_at > now:
        return None
    return JWT_EXPIRED if viewer.credential_kind is CredentialKind.OIDC else TOKEN_EXPIRED


class Sessions:
    def __init__(
        self,
        services: Services,
        ttl_s: float = DEFAULT_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.services = services
        self.ttl_s = ttl_s
        self._clock = clock
        self._open: dict[int, Session] = {}
        self._numbers = itertools.count()
        # The check running now, and when it began.
        self._running: tuple[float, asyncio.Future[None]] | None = None
        self.ended = 0  # sessions stopped, for spacedock_websockets_ended_total

    def open(self, viewer: Viewer, connection: Connection) -> Session:
        session = Session(next(self._numbers), viewer, connection)
        self._open[session.number] = session
        return session

    def close(self, session: Session) -> None:
        self._open.pop(session.number, None)

    def __len__(self) -> int:
        return len(self._open)

    def deliverable(self, session: Session) -> bool:
        """Whether the session may send now: verified recently enough (see above)."""
        return self._clock() < session.verified_at + self.ttl_s - LAPSE_MARGIN_S

    async def verified(self, session: Session) -> bool:
        """Whether the session is deliverable, after a check if need be; False once it is
        no longer open. Raises what a check raised (the database unreachable)."""
        while session.number in self._open:
            if self.deliverable(session):
                return True
            await self.check()
        return False

    async def recheck(self, since: float) -> None:
        """core.common.token_cache.HeldCredentials: a check begun after `since`."""
        await self.check(since)

    async def check(self, since: float | None = None) -> None:
        """Looks every open session's credential up (one check at a time, shared by all
        who ask for one); `since`: the check must have begun after it."""
        # A check that has ended but whose callback has not run yet is no check running:
        # awaiting it would not yield, and a caller looping until its session is deliverable
        # (`verified`, when checks take longer than `ttl_s`) spun without ever letting the
        # callback, or anything else, run (issue 19: a replica froze under a storm).
        while self._running is not None and not self._running[1].done():
            started, running = self._running
            await asyncio.shield(running)
            if since is None or started > since:
                return
        started = self._clock()
        running = asyncio.ensure_future(self._check(started))
        self._running = (started, running)
        running.add_done_callback(lambda _: self._done(running))
        await asyncio.shield(running)

    def _done(self, running: asyncio.Future[None]) -> None:
        if self._running is not None and self._running[1] is running:
            self._running = None
        if not running.cancelled() and (error := running.exception()) is not None:
            log.debug("a credential check failed: %s", type(error).__name__)

    async def _check(self, started: float) -> None:
        sessions = list(self._open.values())
        now = utcnow()
        ending = {s.number: why for s in sessions if (why := expiry_reason(s.viewer, now))}
        held = [s for s in sessions if s.number not in ending]
        token_ids = sorted({s.viewer.token_id for s in held if s.viewer.token_id})
        role_ids = sorted({s.viewer.custom_role.id for s in held if s.viewer.custom_role})
        valid: set[str] = set()
        policies: dict[str, CustomRole] = {}
        if token_ids or role_ids:
            async with self.services.unit(read_only=True) as unit:
                valid = await tokens.still_valid(unit, token_ids)
                found = await owned.by_ids(unit.session, RoleDefinition, None, role_ids)
                policies = {row.id: roles.custom_of(row) for row in found}
        regranted: list[tuple[Session, Viewer]] = []
        for session in held:
            viewer = session.viewer
            if viewer.token_id is not None and viewer.token_id not in valid:
                ending[session.number] = REVOKED
            elif viewer.custom_role is not None:
                now_grants = policies.get(viewer.custom_role.id)
                if now_grants is None:
                    ending[session.number] = ROLE_DELETED
                elif now_grants.policies != viewer.custom_role.policies:
                    regranted.append((session, dataclasses.replace(viewer, custom_role=now_grants)))
        for number, reason in ending.items():
            if (stopped := self._open.pop(number, None)) is not None:
                self.ended += 1
                stopped.connection.stop(reason)
        for session, viewer in regranted:
            if session.number in self._open:
                session.viewer = viewer
                session.connection.regrant(viewer)
        for session in held:
            if session.number in self._open:
                session.verified_at = max(session.verified_at, started)
        # Frames still waiting for a socket when this verification lapses are withdrawn,
        # unless a later check has verified their session again.
        lapse = started + self.ttl_s - LAPSE_MARGIN_S - self._clock()
        asyncio.get_running_loop().call_later(max(0.0, lapse), self._withdraw_lapsed)

    def _withdraw_lapsed(self) -> None:
        for session in list(self._open.values()):
            if not self.deliverable(session):
                session.connection.withdraw_sends()
