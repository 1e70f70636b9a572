"""Verified API tokens held in memory for a moment, so that a busy client's requests and
WebSocket connects skip the token's database lookup (issue 12).

What is held: the SHA-256 of a token (never the token) -> the Viewer it resolved to and
when its lastUsedAt was last written. Only successes are held; an unknown, revoked or
expired token is looked up every time it is sent, so a refusal is never served from here
and attacker-chosen tokens cannot crowd out good entries. At most `max_entries` are held,
the least recently used dropped first.

Why a held Viewer stays true:

- An entry serves for at most `ttl_s` (SPACEDOCK_TOKEN_CACHE_TTL_S, 2 s by default),
  counted from the start of the read that verified it, so from before the snapshot it saw.
- The token's own expiry is checked on every use: a held token is refused at expiry.
- A change committed by this process that could make a Viewer stale (a revocation, a
  custom role's new policies, a deleted role) sets `Unit.credentials_changed`, and the
  cache is cleared as soon as the unit has committed; a lookup that began before the clear
  does not store what it read (the generation check), so once the change has returned no
  request is served the old Viewer.
- Other processes' entries cannot be reached, so the change waits them out instead: when
  another process may hold a copy (always for `spacedock token revoke`; on Postgres, where
  replicas share the database, for the mutations too), the change returns only after
  `ttl_s` has passed since its commit, by which time every entry read before the commit
  has lapsed. So when a revocation returns, the token is refused by every server, with no
  read per request and no channel between processes. (Why not the event bus: SQLite has
  no cross-process bus, a replica listens to Postgres only while someone subscribes, and
  NOTIFY has no replay, so the TTL bound would be needed anyway; waiting it out makes the
  guarantee exact at the cost of a slower revoke, a rare administrative act.) Every
  process on one database must use the same SPACEDOCK_TOKEN_CACHE_TTL_S.

Open WebSockets hold Viewers too, for as long as they stay open (core.access.sessions): they are
`HeldCredentials` registered here. A change rechecks them before it returns (this
process), and each socket sends only while a check that began within `ttl_s` found its
credential as held, so the same wait covers other processes' sockets (issue 18).

The lastUsedAt write (at most once a minute per token) is claimed on the entry before it
is written, so concurrent hits do not repeat it; across processes each writes its own.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from core.common.rbac import Viewer
from providers.kept import Kept

log = logging.getLogger("spacedock.token_cache")

DEFAULT_TTL_S = 2.0
DEFAULT_MAX_ENTRIES = 10_000
# Waited beyond the TTL, so that a timer firing a hair early cannot end the wait too soon.
LAPSE_MARGIN_S = 0.05


class HeldCredentials(Protocol):
    """Viewers held elsewhere in this process: open WebSockets (core.access.sessions)."""

    async def recheck(self, since: float) -> None:
        """Returns once every Viewer held has been looked up again by a read that began
        after `since` (time.monotonic()), and what no longer holds was acted on."""
        ...


@dataclass
class Entry:
    viewer: Viewer
    # When lastUsedAt was last written (or claimed for writing); None: never.
    last_used_at: datetime | None
    # time.monotonic() at the start of the read that verified the token.
    verified_at: float


@dataclass(frozen=True)
class Ticket:
    """Taken before a lookup: when it began and which generation of the cache it saw."""

    generation: int
    started_at: float


class TokenCache:
    def __init__(
        self,
        ttl_s: float = DEFAULT_TTL_S,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        others_may_cache: bool = True,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        # Whether another process may hold tokens verified on this database (see above).
        self.others_may_cache = others_may_cache
        self._clock = clock
        self._sleep = sleep
        # Unused entries go after ttl_s: they could not serve anyway.
        self._entries: Kept[str, Entry] = Kept(max_entries, ttl_s, clock)
        self._generation = 0
        self.holders: list[HeldCredentials] = []

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, token_hash: str) -> Entry | None:
        """The entry for this hash while it is fresh; a lapsed one is dropped."""
        entry = self._entries.get(token_hash)
        if entry is None:
            return None
        if self._clock() - entry.verified_at >= self.ttl_s:
            self._entries.pop(token_hash)
            return None
        return entry

    def ticket(self) -> Ticket:
        return Ticket(self._generation, self._clock())

    def put(
        self, token_hash: str, ticket: Ticket, viewer: Viewer, last_used_at: datetime | None
    ) -> Entry:
        """The entry for what a lookup begun at `ticket` found; it is held only if nothing
        was invalidated since the ticket was taken."""
        entry = Entry(viewer, last_used_at, ticket.started_at)
        if ticket.generation != self._generation:
            return entry
        self._entries.put(token_hash, entry)
        return entry

    def drop(self, token_hash: str) -> None:
        self._entries.pop(token_hash)

    def clear(self) -> float:
        """Drops every entry; returns when (time.monotonic()), for `settle`."""
        self._generation += 1
        self._entries.clear()
        return self._clock()

    async def settle(self, since: float) -> None:
        """After a commit that may make a held Viewer stale (and `clear()`, at `since`):
        returns once no Viewer read before it is in use. This process's other holders look
        theirs up again; entries another process may hold are waited out, and so are this
        process's holders when their recheck fails (their own verification lapses then)."""
        wait = self.others_may_cache
        for holder in self.holders:
            try:
                await holder.recheck(since)
            except Exception as error:  # the database, most likely: the wait covers it
                log.warning("rechecking open connections failed: %s", type(error).__name__)
                wait = True
        if wait:
            await self._sleep(self.ttl_s + LAPSE_MARGIN_S)
