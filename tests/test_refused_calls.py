"""The per-credential budget of refused-call rows (core.common.refused_calls), on a clock the
test moves: windows, summaries, and what is still to be written when a window ends."""

from __future__ import annotations

from datetime import UTC, datetime

from core.common.refused_calls import WINDOW_S, Refusal, RefusedCalls


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def refusal(
    credential: str = "tok_a", action: str = "createRole", outcome: str = "FORBIDDEN"
) -> Refusal:
    return Refusal(
        credential=credential,
        org_id="org_x",
        actor="a",
        actor_kind="API_TOKEN",
        actor_token_id=credential,
        action=action,
        outcome=outcome,
        at=datetime.now(UTC),
        request_id=None,
    )


def test_each_credential_has_its_own_rows_then_one_summary_per_window() -> None:
    clock = Clock()
    budget = RefusedCalls(per_minute=2, clock=clock)
    assert budget.admit(refusal()) is None
    assert budget.admit(refusal()) is None
    assert budget.admit(refusal("tok_b")) is None  # another credential, its own budget
    summary = budget.admit(refusal())
    assert summary is not None and summary.calls == 1 and summary.written == 0
    again = budget.admit(refusal(action="deleteRole", outcome="NOT_FOUND"))
    assert again is summary and summary.calls == 2
    assert summary.input["actions"] == {"createRole": 1, "deleteRole": 1}
    assert summary.outcome == "FORBIDDEN,NOT_FOUND"
    assert budget.unwritten() == [summary]
    summary.written = summary.calls
    assert budget.unwritten() == []


def test_a_window_that_ends_hands_over_its_last_counts_and_is_forgotten() -> None:
    clock = Clock()
    budget = RefusedCalls(per_minute=1, clock=clock)
    budget.admit(refusal())
    summary = budget.admit(refusal())
    assert summary is not None
    summary.written = 1
    budget.admit(refusal())  # counted, not yet written
    clock.now += WINDOW_S
    assert budget.admit(refusal()) is None  # a new window: a row of its own again
    assert budget.unwritten() == [summary] and summary.calls == 2
    clock.now += WINDOW_S
    assert budget.unwritten() == []
    assert budget.windows == {}
