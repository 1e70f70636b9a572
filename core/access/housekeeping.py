"""The access housekeeping loop, two guarded tasks of the loop kit:

- audit events past SPACEDOCK_AUDIT_RETENTION_DAYS are pruned ten times per retention
  period (at most hourly), so a short retention, as tests use, holds within a tenth;
- every second, WebSockets' credentials are checked (core.access.sessions): those revoked or
  expired are closed, those whose role changed are regranted, and the rest stay
  verified for sending;
- every second, the summaries of refused calls past a credential's budget are brought up
  to date (core.common.refused_calls), and once more on stop.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import ClassVar

from core.access import audit
from core.access.sessions import Sessions
from core.common.loops import STOP_GRACE_S, Loop, LoopStats, metric
from core.common.services import Services

log = logging.getLogger("spacedock.housekeeping")

MIN_INTERVAL_S = 0.1
MAX_INTERVAL_S = 3600.0
SESSION_CHECK_S = 1.0
SUMMARIES_S = 1.0


@dataclass
class HousekeepingStats(LoopStats):
    loop: ClassVar[str] = "housekeeping"

    audit_pruned: int = metric(
        "counter",
        "spacedock_audit_events_pruned_total",
        "Audit events deleted after SPACEDOCK_AUDIT_RETENTION_DAYS.",
    )
    sessions_ended: int = metric(
        "counter",
        "spacedock_websockets_ended_total",
        "WebSockets closed (4403) because their token was revoked, their credential expired "
        "or their custom role was deleted.",
    )


class Housekeeping:
    def __init__(self, services: Services, audit_retention_days: float, sessions: Sessions) -> None:
        self.services = services
        self.sessions = sessions
        self.retention_days = audit_retention_days
        self.interval_s = min(
            MAX_INTERVAL_S, max(MIN_INTERVAL_S, audit_retention_days * 86400 / 10)
        )
        self.stats = HousekeepingStats()
        self.loop = Loop("housekeeping", self.stats)

    def start(self) -> None:
        self.loop.run("audit-retention", self._prune_step)
        self.loop.run("credential-sessions", self._sessions_step)
        self.loop.run("refused-call-summaries", self._summaries_step)
        log.info(
            "housekeeping started: audit events kept %g days, pruned every %gs",
            self.retention_days,
            self.interval_s,
        )

    async def _prune_step(self) -> None:
        async with self.services.unit() as unit:
            pruned = await audit.prune(unit, self.retention_days)
        self.stats.audit_pruned += pruned
        await self.loop.nap(self.interval_s)

    async def _sessions_step(self) -> None:
        await self.sessions.check()
        self.stats.sessions_ended = self.sessions.ended
        await self.loop.nap(SESSION_CHECK_S)

    async def _summaries_step(self) -> None:
        await audit.write_summaries(self.services)
        await self.loop.nap(SUMMARIES_S)

    async def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        await self.loop.stop(grace_s)
        try:
            await audit.write_summaries(self.services)
        except Exception as error:  # the database may be gone at shutdown; say so
            log.warning("refused-call summaries not written at stop: %s", type(error).__name__)
