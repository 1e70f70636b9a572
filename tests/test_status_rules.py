"""The status rules as pure functions: threshold, damping, hold, staleness and the
reasons they give. No database, server, clock or sleep: each case is a value in and a
value out."""

from __future__ import annotations

import pytest

from core.spaces.reasons import StatusReasonCode
from core.spaces.status_rules import (
    OPERATOR_HOLD,
    PROBE_STALE,
    ProbeResult,
    ProbeState,
    Reason,
    after_probe,
    shown,
    visible_status,
)
from core.spaces.statuses import SpaceStatus

ACTIVE, INACTIVE, UNKNOWN = SpaceStatus.ACTIVE, SpaceStatus.INACTIVE, SpaceStatus.UNKNOWN
OK = ProbeResult(ok=True, version="v1.31.2")
REFUSED = ProbeResult(ok=False, error="connection refused")


def run(state: ProbeState, *results: ProbeResult, threshold: int = 3) -> list[ProbeState]:
    """The probes' verdict after each result in turn."""
    seen = []
    for result in results:
        state, _ = after_probe(state, result, threshold)
        seen.append(state)
    return seen


def test_a_success_is_active_at_once_and_clears_the_failures() -> None:
    state, reason = after_probe(ProbeState(INACTIVE, 7), OK, threshold=3)
    assert state == ProbeState(ACTIVE, 0)
    assert reason == Reason("probe ok (v1.31.2)", StatusReasonCode.PROBE_OK)


def test_a_new_space_that_fails_stays_unknown_until_the_threshold() -> None:
    states = run(ProbeState(UNKNOWN), REFUSED, REFUSED, REFUSED, REFUSED)
    assert [s.status for s in states] == [UNKNOWN, UNKNOWN, INACTIVE, INACTIVE]
    assert [s.failures for s in states] == [1, 2, 3, 4]


def test_an_active_space_stays_active_below_the_threshold() -> None:
    states = run(ProbeState(ACTIVE), REFUSED, REFUSED, OK, REFUSED, REFUSED, REFUSED)
    assert [s.status for s in states] == [ACTIVE, ACTIVE, ACTIVE, ACTIVE, ACTIVE, INACTIVE]


@pytest.mark.parametrize("threshold", [1, 2, 5])
def test_the_threshold_th_failure_in_a_row_is_inactive(threshold: int) -> None:
    states = run(ProbeState(ACTIVE), *[REFUSED] * threshold, threshold=threshold)
    assert [s.status for s in states] == [ACTIVE] * (threshold - 1) + [INACTIVE]


def test_a_failure_reason_is_the_errors_own_words_and_code() -> None:
    """One wording: the event says what lastProbe.error says (the count is
    consecutiveFailures)."""
    _, reason = after_probe(ProbeState(ACTIVE, 2), REFUSED, threshold=3)
    assert reason == Reason("connection refused", StatusReasonCode.CONNECTION_REFUSED)
    minted = ProbeResult(
        ok=False, error="minting failed", error_code=StatusReasonCode.CREDENTIALS_UNAVAILABLE
    )
    assert (
        after_probe(ProbeState(ACTIVE), minted, 3)[1].code
        == StatusReasonCode.CREDENTIALS_UNAVAILABLE
    )


def test_a_hold_reads_inactive_whatever_the_probes_or_staleness_say() -> None:
    for probes in (ProbeState(ACTIVE), ProbeState(UNKNOWN), ProbeState(INACTIVE, 5)):
        assert visible_status(probes, held=True, stale=True) == (INACTIVE, OPERATOR_HOLD)
        assert visible_status(probes, held=True) == (INACTIVE, OPERATOR_HOLD)


def test_a_stale_space_reads_unknown_probe_stale() -> None:
    assert visible_status(ProbeState(ACTIVE), held=False, stale=True) == (UNKNOWN, PROBE_STALE)
    assert visible_status(ProbeState(INACTIVE, 3), held=False, stale=True) == (
        UNKNOWN,
        PROBE_STALE,
    )


def test_otherwise_the_probes_verdict_shows_with_the_failure_behind_or_counting() -> None:
    unauthorized = Reason("401 unauthorized", StatusReasonCode.UNAUTHORIZED)
    assert visible_status(ProbeState(ACTIVE), held=False) == (ACTIVE, None)
    assert visible_status(ProbeState(UNKNOWN), held=False) == (UNKNOWN, "registered")
    counting = shown(ProbeState(UNKNOWN, 2), held=False, last_error=unauthorized)
    assert counting == (UNKNOWN, unauthorized)
    failing = shown(ProbeState(INACTIVE, 3), held=False, last_error=unauthorized)
    assert failing == (INACTIVE, unauthorized)


def test_a_deregistered_space_reads_inactive_deregistered_whatever_else() -> None:
    for probes in (ProbeState(ACTIVE), ProbeState(INACTIVE, 4)):
        for held in (True, False):
            status, reason = shown(probes, held=held, deregistered=True, stale=True)
            assert status == INACTIVE
            assert reason == Reason("deregistered", StatusReasonCode.DEREGISTERED)


def test_a_held_space_probed_back_to_health_shows_no_transition() -> None:
    """What the probe loop compares: the visible status before and after a result."""
    before = ProbeState(INACTIVE, 4)
    after, _ = after_probe(before, OK, threshold=3)
    shown = [visible_status(state, held=True)[0] for state in (before, after)]
    assert shown == [INACTIVE, INACTIVE]
    shown = [visible_status(state, held=False)[0] for state in (before, after)]
    assert shown == [INACTIVE, ACTIVE]
