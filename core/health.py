"""The one health rule: what status a space shows, in every view.

An operator hold reads INACTIVE; a space with no probe result for
`STALE_AFTER_INTERVALS` intervals reads UNKNOWN ("probe stale"); otherwise
the status is what the probes gave. `db.spaces.effective_status` is the same
rule in SQL, for filters.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from db.tables import Space

STALE_AFTER_INTERVALS = 3
PROBE_STALE = "probe stale"
OPERATOR_HOLD = "operator hold"


@dataclass(frozen=True)
class HealthRule:
    probe_interval_s: float

    def stale_before(self, now: datetime) -> datetime:
        return now - timedelta(seconds=self.probe_interval_s * STALE_AFTER_INTERVALS)

    def status_of(self, space: Space, now: datetime) -> tuple[str, str | None]:
        """(status, why): why names the hold, staleness, or the failure behind INACTIVE."""
        if space.held:
            return "INACTIVE", OPERATOR_HOLD
        last_result = space.last_probe_at or space.created_at
        if space.deregistered_at is None and last_result < self.stale_before(now):
            return "UNKNOWN", PROBE_STALE
        if space.probe_status == "INACTIVE":
            return "INACTIVE", space.last_probe_error
        return space.probe_status, None


def stored_status(space: Space) -> str:
    """The status transitions are computed from: the hold over the probes' verdict."""
    return "INACTIVE" if space.held else space.probe_status
