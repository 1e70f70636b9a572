"""The access housekeeping loop, two guarded tasks of the loop kit:

- audit events past SPACEDOCK_AUDIT_RETENTION_DAYS are pruned ten times per retention
  period (at most hourly), so a short retention, as tests use, holds within a tenth;
- every second, WebSockets whose credential was revoked or expired are closed
  (core.sessions).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import ClassVar

from core import audit
from core.loops import Loop, LoopStats, metric
from core.services import Services
from core.sessions import Sessions

log = logging.getLogger("spacedock.housekeeping")

MIN_INTERVAL_S = 0.1
MAX_INTERVAL_S = 3600.0
SESSION_CHECK_S = 1.0


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
        "WebSockets closed (4403) because their token was revoked or their credential expired.",
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
        self.stats.sessions_ended += await self.sessions.check(self.services)
        await self.loop.nap(SESSION_CHECK_S)

    async def stop(self) -> None:
        await self.loop.stop()
