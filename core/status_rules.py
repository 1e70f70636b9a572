"""The status rules of a space, as pure functions: no database, no clock, no network, so
they are unit tested without I/O or sleeps, and every caller applies the same rules.

- `after_probe`: threshold and damping. A success is ACTIVE at once; each failure
  counts, and the threshold-th in a row is INACTIVE; below it the status stays (a new
  space stays UNKNOWN, an ACTIVE one stays ACTIVE).
- `visible_status`: what every view shows. An operator hold reads INACTIVE whatever the
  probes say; a live space with no result for a while reads UNKNOWN ("probe stale");
  otherwise the probes' verdict, with the last failure as the reason behind INACTIVE.

Both answer (state or status, reason), so reason codes can join the reason words.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.statuses import SpaceStatus

PROBE_STALE = "probe stale"
OPERATOR_HOLD = "operator hold"
HOLD_LIFTED = "hold lifted"
REGISTERED = "registered"


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


def after_probe(state: ProbeState, result: ProbeResult, threshold: int) -> tuple[ProbeState, str]:
    """The probes' verdict after one more result, and the reason words for a transition
    it causes."""
    if result.ok:
        return ProbeState(SpaceStatus.ACTIVE, 0), f"probe ok ({result.version})"
    failures = state.failures + 1
    status = SpaceStatus.INACTIVE if failures >= threshold else state.status
    return ProbeState(status, failures), f"{failures} consecutive failures: {result.error}"


def visible_status(
    probes: ProbeState, *, held: bool, stale: bool = False, last_error: str | None = None
) -> tuple[SpaceStatus, str | None]:
    """The status a space shows and why (None: nothing to explain). `stale`: a live
    space whose last probe result is older than the staleness limit."""
    if held:
        return SpaceStatus.INACTIVE, OPERATOR_HOLD
    if stale:
        return SpaceStatus.UNKNOWN, PROBE_STALE
    if probes.status == SpaceStatus.INACTIVE:
        return SpaceStatus.INACTIVE, last_error
    return probes.status, None
