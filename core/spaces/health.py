"""The one health rule: what status a space shows, in every view.

`core.spaces.status_rules.visible_status` is the rule; this applies it to a stored space at a
moment: a live space with no probe result for `STALE_AFTER_INTERVALS` intervals is
stale. `db.spaces.EFFECTIVE_STATUS` is the same rule in SQL, for filters.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from core.spaces.reasons import StatusReasonCode, failure_code
from core.spaces.status_rules import ProbeState, Reason, shown
from core.spaces.statuses import SpaceStatus
from db.records import SpaceRow
from db.tables import Space

STALE_AFTER_INTERVALS = 3


class ProbeColumns(Protocol):
    @property
    def probe_status(self) -> str: ...

    @property
    def consecutive_failures(self) -> int: ...


def probe_state(space: ProbeColumns) -> ProbeState:
    return ProbeState(SpaceStatus(space.probe_status), space.consecutive_failures)


@dataclass(frozen=True)
class HealthRule:
    probe_interval_s: float

    def stale_before(self, now: datetime) -> datetime:
        return now - timedelta(seconds=self.probe_interval_s * STALE_AFTER_INTERVALS)

    def status_of(self, space: SpaceRow, now: datetime) -> tuple[SpaceStatus, str | None]:
        """(status, why): why names deregistration, the hold, staleness, or the failure
        behind INACTIVE or counting toward it."""
        status, reason = self.shown(space, now)
        return status, None if reason is None else reason.words

    def shown(self, space: SpaceRow, now: datetime) -> tuple[SpaceStatus, Reason | None]:
        return self.shown_if_stale_before(space, self.stale_before(now))

    def shown_if_stale_before(
        self, space: SpaceRow, stale_before: datetime
    ) -> tuple[SpaceStatus, Reason | None]:
        """`shown` with the staleness limit worked out once, for a page of spaces."""
        last_result = space.last_probe_at or space.created_at
        return shown(
            probe_state(space),
            held=space.held,
            deregistered=space.deregistered_at is not None,
            stale=space.deregistered_at is None and last_result < stale_before,
            # The rule reads the last failure only while failures count.
            last_error=last_error(space) if space.consecutive_failures else None,
        )


def last_error(space: SpaceRow) -> Reason | None:
    """The last probe's failure with its code (codes are stored with each result)."""
    if space.last_probe_error is None:
        return None
    code = space.last_probe_error_code
    return Reason(
        space.last_probe_error,
        StatusReasonCode(code) if code else failure_code(space.last_probe_error),
    )


def stored_status(space: Space) -> SpaceStatus:
    """The status transitions are computed from: deregistration and the hold over the
    probes' verdict."""
    return shown(
        probe_state(space), held=space.held, deregistered=space.deregistered_at is not None
    )[0]
