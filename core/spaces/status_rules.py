"""The status rules of a space, as pure functions: no database, no clock, no network, so
they are unit tested without I/O or sleeps, and every caller applies the same rules.

- `after_probe`: threshold and damping. A success is ACTIVE at once; each failure
  counts, and the threshold-th in a row is INACTIVE; below it the status stays (a new
  space stays UNKNOWN, an ACTIVE one stays ACTIVE).
- `shown`: what every view shows. A deregistered space reads INACTIVE; an operator hold
  reads INACTIVE whatever the probes say; a live space with no result for a while reads
  UNKNOWN ("probe stale"); otherwise the probes' verdict, with the last failure as the
  reason behind INACTIVE or the failures counting toward it.

Both answer a `Reason`: the words and the StatusReasonCode (core.spaces.reasons).
"""

from __future__ import annotations

from dataclasses import dataclass

from core.spaces.reasons import StatusReasonCode, failure_code
from core.spaces.statuses import SpaceStatus

PROBE_STALE = "probe stale"
OPERATOR_HOLD = "operator hold"
HOLD_LIFTED = "hold lifted"
REGISTERED = "registered"
DEREGISTERED = "deregistered"


@dataclass(frozen=True)
class ProbeState:
    """What the probes alone say about a space: their verdict and the failures in a row."""

    status: SpaceStatus
    failures: int = 0


@dataclass(frozen=True)
class ProbeResult:
    ok: bool
    version: str | None = None
    error: str | None = None
    error_code: StatusReasonCode | None = None


@dataclass(frozen=True)
class Reason:
    """Why: the words people read and the code programs switch on."""

    words: str
    code: StatusReasonCode


def after_probe(
    state: ProbeState, result: ProbeResult, threshold: int
) -> tuple[ProbeState, Reason]:
    """The probes' verdict after one more result, and the reason for a transition it
    causes: the failure in the words of the last probe's error (the count of failures is
    consecutiveFailures), or the version a success reported."""
    if result.ok:
        return ProbeState(SpaceStatus.ACTIVE, 0), Reason(
            f"probe ok ({result.version})", StatusReasonCode.PROBE_OK
        )
    failures = state.failures + 1
    status = SpaceStatus.INACTIVE if failures >= threshold else state.status
    reason = Reason(
        result.error or "probe failed",
        result.error_code or failure_code(result.error or ""),
    )
    return ProbeState(status, failures), reason


_DEREGISTERED = Reason(DEREGISTERED, StatusReasonCode.DEREGISTERED)
_HELD = Reason(OPERATOR_HOLD, StatusReasonCode.OPERATOR_HOLD)
_STALE = Reason(PROBE_STALE, StatusReasonCode.PROBE_STALE)
_REGISTERED = Reason(REGISTERED, StatusReasonCode.REGISTERED)


def shown(
    probes: ProbeState,
    *,
    held: bool,
    deregistered: bool = False,
    stale: bool = False,
    last_error: Reason | None = None,
) -> tuple[SpaceStatus, Reason | None]:
    """The status a space shows and why (None: a healthy ACTIVE space). `stale`: a live
    space whose last probe result is older than the staleness limit; `last_error`: the
    last probe's failure, behind INACTIVE or counting toward it."""
    if deregistered:
        return SpaceStatus.INACTIVE, _DEREGISTERED
    if held:
        return SpaceStatus.INACTIVE, _HELD
    if stale:
        return SpaceStatus.UNKNOWN, _STALE
    if probes.failures > 0 and last_error is not None:
        return probes.status, last_error
    if probes.status == SpaceStatus.UNKNOWN:
        return SpaceStatus.UNKNOWN, _REGISTERED
    return probes.status, None


def visible_status(
    probes: ProbeState,
    *,
    held: bool,
    deregistered: bool = False,
    stale: bool = False,
    last_error: Reason | None = None,
) -> tuple[SpaceStatus, str | None]:
    """The status a space shows and the words why."""
    status, reason = shown(
        probes, held=held, deregistered=deregistered, stale=stale, last_error=last_error
    )
    return status, None if reason is None else reason.words
