"""The one health rule: what status a space shows, in every view.

`core.status_rules.visible_status` is the rule; this applies it to a stored space at a
moment: a live space with no probe result for `STALE_AFTER_INTERVALS` intervals is
stale. `db.spaces.effective_status` is the same rule in SQL, for filters.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from core.status_rules import ProbeState, visible_status
from core.statuses import SpaceStatus
from db.tables import Space

STALE_AFTER_INTERVALS = 3


def probe_state(space: Space) -> ProbeState:
    return ProbeState(SpaceStatus(space.probe_status), space.consecutive_failures)


@dataclass(frozen=True)
class HealthRule:
    probe_interval_s: float

    def stale_before(self, now: datetime) -> datetime:
        return now - timedelta(seconds=self.probe_interval_s * STALE_AFTER_INTERVALS)

    def status_of(self, space: Space, now: datetime) -> tuple[SpaceStatus, str | None]:
        """(status, why): why names the hold, staleness, or the failure behind INACTIVE."""
        last_result = space.last_probe_at or space.created_at
        stale = space.deregistered_at is None and last_result < self.stale_before(now)
        return visible_status(
            probe_state(space), held=space.held, stale=stale, last_error=space.last_probe_error
        )


def stored_status(space: Space) -> SpaceStatus:
    """The status transitions are computed from: the hold over the probes' verdict."""
    return visible_status(probe_state(space), held=space.held)[0]
