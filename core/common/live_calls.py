"""Caps on live cluster calls, so that one small query cannot fan out into hundreds.

Fields such as `Space.namespaces` (and createNamespace) call a cluster while the
request waits. Each operation gets a `LiveCallBudget` (made with its loaders, so
per HTTP request, per WebSocket operation and per subscription event): at most
`per_request` calls in all, at most `concurrency_per_request` at once; and all
operations of the process share `concurrency_per_server` slots. A call beyond the
budget is not made: it fails as a ProviderError, which the field answers as
PROVIDER_ERROR "too many live calls in one request". Waiting for a slot is part of
the call, so the call's own timeout (and issue 10's per-field one) covers it.

What the calls bring back is budgeted too (`items_per_request`): turning a cluster's
answer into GraphQL costs the event loop about 25 µs per item (0.5 s for 20,000
namespaces), so one operation may not return more than that many live items.

A subscription event is budgeted per credential, not per subscription (issue 18): the
runs of one event for every subscription a credential started (each distinct document
or set of variables is a run of its own, api.shared_subscriptions) share one allowance
(`event_budget`), so 60 subscriptions selecting `space { namespaces }` still make at
most `per_request` calls per event, not 60.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from providers.errors import PermanentError
from providers.kept import Kept

TOO_MANY = "too many live calls in one request"
TOO_MANY_ITEMS = "too many live results in one request"
# Allowances of recent (credential, event) pairs kept; an event's runs all start within
# moments of each other, so only a flood of events could make one start afresh, and one
# unused for EVENT_BUDGET_IDLE_S is done with.
EVENT_BUDGETS_KEPT = 4096
EVENT_BUDGET_IDLE_S = 60.0


@dataclass(frozen=True)
class LiveCallLimits:
    per_request: int = 20  # SPACEDOCK_LIVE_CALLS_PER_REQUEST
    concurrency_per_request: int = 5  # SPACEDOCK_LIVE_CALL_CONCURRENCY
    concurrency_per_server: int = 64  # SPACEDOCK_LIVE_CALLS_PER_SERVER
    items_per_request: int = 5_000  # SPACEDOCK_LIVE_ITEMS_PER_REQUEST


class LiveCalls:
    """The process's share: its limits and the server-wide slots."""

    def __init__(
        self, limits: LiveCallLimits | None = None, events_kept: int = EVENT_BUDGETS_KEPT
    ) -> None:
        self.limits = limits or LiveCallLimits()
        self._server_slots = asyncio.Semaphore(self.limits.concurrency_per_server)
        self._event_budgets: Kept[tuple[str, str], LiveCallBudget] = Kept(
            events_kept, EVENT_BUDGET_IDLE_S
        )

    def budget(self) -> LiveCallBudget:
        return LiveCallBudget(self.limits, self._server_slots)

    def event_budget(self, credential: str, event: str) -> LiveCallBudget:
        """The one allowance of every subscription run of `credential` for `event`."""
        key = (credential, event)
        budget = self._event_budgets.get(key)
        if budget is None:
            budget = self.budget()
            self._event_budgets.put(key, budget)
        return budget


class LiveCallBudget:
    """One operation's allowance of live calls."""

    def __init__(self, limits: LiveCallLimits, server_slots: asyncio.Semaphore) -> None:
        self.limits = limits
        self.started = 0
        self.items = 0
        self._slots = asyncio.Semaphore(limits.concurrency_per_request)
        self._server_slots = server_slots

    @asynccontextmanager
    async def call(self) -> AsyncIterator[None]:
        """Wraps one live call; PermanentError (TOO_MANY) when the budget is spent."""
        if self.started >= self.limits.per_request:
            raise PermanentError(
                f"{TOO_MANY}: at most {self.limits.per_request} "
                "(SPACEDOCK_LIVE_CALLS_PER_REQUEST); ask for fewer at once"
            )
        self.started += 1
        async with self._slots, self._server_slots:
            yield

    @property
    def items_left(self) -> int:
        """How many more results the operation may take."""
        return max(0, self.limits.items_per_request - self.items)

    def take_items(self, count: int, what: str) -> None:
        """Counts `count` results of a call against the operation's allowance;
        PermanentError (TOO_MANY_ITEMS) when they do not fit."""
        if self.items + count > self.limits.items_per_request:
            raise PermanentError(
                f"{TOO_MANY_ITEMS}: {count:,} {what} would pass the limit of "
                f"{self.limits.items_per_request:,} (SPACEDOCK_LIVE_ITEMS_PER_REQUEST)"
            )
        self.items += count
