"""How many refused calls one credential may write to the audit log, and what happens past it.

A refused call costs its caller nothing but a request, and each one used to be a row of
its own: a viewer wrote 300 rows in 1.8 s with aliased refused mutations. Now each
credential (an API token by its id, an OIDC subject) has its first `per_minute` refused
calls of every minute recorded one by one; past that, the minute's further refused calls
are counted in one summary event (action `refusedCallsOverLimit`, `calls` = how many,
which mutations and outcomes, first and last time). Nothing is lost but the detail: the
summary is written when it begins and rewritten at most once a second while it grows
(core.access.housekeeping), so an auditor sees at once that refused calls went on. Allowed calls
are never limited: each is a change the caller was entitled to make.

Budgets are per process: N replicas let a credential write N times as many rows.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from core.common.ids import new_id

SUMMARY_ACTION = "refusedCallsOverLimit"
WINDOW_S = 60.0
# Mutations (and outcomes) listed in a summary's input, most frequent first.
MAX_KINDS = 50


@dataclass
class Summary:
    """The refused calls of one credential past its limit within one window."""

    id: str
    org_id: str
    actor: str
    actor_kind: str
    actor_token_id: str | None
    first_at: datetime
    last_at: datetime
    request_id: str | None
    calls: int = 0
    actions: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    # How many calls the stored event counts so far (0: not written yet).
    written: int = 0

    @property
    def input(self) -> dict[str, object]:
        return {
            "actions": dict(self.actions.most_common(MAX_KINDS)),
            "outcomes": dict(self.outcomes.most_common(MAX_KINDS)),
            "firstAt": self.first_at.isoformat(),
            "lastAt": self.last_at.isoformat(),
        }

    @property
    def outcome(self) -> str:
        """Every code seen, once each, most frequent first."""
        common = [outcome for outcome, _ in self.outcomes.most_common()]
        codes = (code for outcome in common for code in outcome.split(","))
        return ",".join(dict.fromkeys(codes))


@dataclass
class Window:
    started: float
    rows: int = 0
    summary: Summary | None = None


@dataclass(frozen=True)
class Refusal:
    """One refused call, as far as the budget needs to know."""

    credential: str
    org_id: str
    actor: str
    actor_kind: str
    actor_token_id: str | None
    action: str
    outcome: str
    at: datetime
    request_id: str | None


class RefusedCalls:
    """The per-credential budget of audit rows for refused calls (this process's)."""

    def __init__(self, per_minute: int = 30, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_minute = per_minute
        self.clock = clock
        self.windows: dict[str, Window] = {}
        # Summaries of windows that ended before their last count was written.
        self.ended: list[Summary] = []

    def admit(self, refusal: Refusal) -> Summary | None:
        """None when the call gets a row of its own; otherwise the summary that now counts
        it (new when `written` is 0, to be written at once)."""
        now = self.clock()
        window = self.windows.get(refusal.credential)
        if window is None or now - window.started >= WINDOW_S:
            if window is not None and window.summary is not None:
                self.ended.append(window.summary)
            window = self.windows[refusal.credential] = Window(now)
        if window.rows < self.per_minute:
            window.rows += 1
            return None
        if window.summary is None:
            window.summary = Summary(
                id=new_id("aud"),
                org_id=refusal.org_id,
                actor=refusal.actor,
                actor_kind=refusal.actor_kind,
                actor_token_id=refusal.actor_token_id,
                first_at=refusal.at,
                last_at=refusal.at,
                request_id=refusal.request_id,
            )
        summary = window.summary
        summary.calls += 1
        summary.last_at = refusal.at
        summary.actions[refusal.action] += 1
        summary.outcomes[refusal.outcome] += 1
        return summary

    def unwritten(self) -> list[Summary]:
        """Summaries whose stored event counts fewer calls than they do; windows long over
        are forgotten once nothing of theirs is left to write."""
        now = self.clock()
        found = [summary for summary in self.ended if summary.written < summary.calls]
        self.ended = []
        for credential, window in list(self.windows.items()):
            summary = window.summary
            if summary is not None and summary.written < summary.calls:
                found.append(summary)
            elif now - window.started >= WINDOW_S:
                del self.windows[credential]
        return found
