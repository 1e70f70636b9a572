"""App Advisor fields, mutations and the adviceChanged subscription: authorize, call the
domain, shape the answer.

A CloudSpace's `advice` connection is read through the request's loaders: the first
page of every CloudSpace a query lists comes from one statement, their counts by
severity from another, so a page of CloudSpace cards costs the same SQL whatever its
size. A page after a cursor is read for its one CloudSpace.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass, replace
from datetime import datetime

from core.advisor import findings as advice
from core.advisor.model import Rule
from core.advisor.rules import RULES
from core.common.errors import ApiError
from core.common.events import ADVICE_CHANGED
from db import advice_reads
from db.advice_reads import AdviceFilter
from db.advisor_tables import AdvisorExemption, AdvisorFinding, AdvisorSchedule
from db.app_tables import App
from db.cloudspace_tables import CloudSpace
from db.pages import Keyset, Page
from resolvers.common.context import Context
from resolvers.common.mutations import Outcome, run
from resolvers.common.pagination import checked_first, position, with_cursors
from resolvers.common.subscription_mode import SubscriptionMode

KIND = "AdvisorFinding"
ORDER_LABEL = "SEVERITY"


@dataclass(frozen=True)
class AdvicePage:
    page: Page[AdvisorFinding]
    counts: dict[str, int]  # open findings by severity, under the filter but its severity


def wanted(
    severity: str | None, app_id: str | None, include_resolved: bool, include_dismissed: bool
) -> AdviceFilter:
    """Which of a CloudSpace's findings a field asks for."""
    return AdviceFilter(severity, app_id, include_resolved, include_dismissed)


def rules() -> tuple[Rule, ...]:
    return RULES


def require_view(context: Context) -> None:
    context.caller.require_to_read(advice.VIEW)


async def _counts(context: Context, by: str, parent_id: str, found: AdviceFilter) -> dict[str, int]:
    return await context.loaders.advice_counts.load((by, parent_id, found.without_severity()))


async def _page(
    context: Context,
    by: str,
    parent_id: str,
    found: AdviceFilter,
    first: int | None,
    after: str | None,
) -> AdvicePage:
    """One page of a parent's findings, most severe first, with the counts."""
    require_view(context)
    size = checked_first(first)
    by_severity = await _counts(context, by, parent_id, found)
    if found.severity is not None:
        total = by_severity.get(found.severity, 0)
    else:
        total = sum(by_severity.values())
    if after is None:
        rows = await context.loaders.advice_first_page.load((by, parent_id, found, size))
        keys = [row.severity_order for row in rows[:size]]
        read = Page(items=rows[:size], has_next=len(rows) > size, total=total, keys=keys)
    else:
        keyset = Keyset(size, False, position(after, "after", KIND, ORDER_LABEL))
        async with context.loaders.reading() as session:
            read = await advice_reads.page(
                session, context.caller.org_id, by, parent_id, found, keyset
            )
        read = replace(read, total=total)
    return AdvicePage(with_cursors(read, KIND, ORDER_LABEL), by_severity)


async def page(
    context: Context,
    cloud_space: CloudSpace,
    found: AdviceFilter,
    first: int | None,
    after: str | None,
) -> AdvicePage:
    """A CloudSpace's findings (CloudSpace.advice)."""
    return await _page(context, advice_reads.BY_CLOUD_SPACE, cloud_space.id, found, first, after)


async def app_page(
    context: Context, app: App, found: AdviceFilter, first: int | None, after: str | None
) -> AdvicePage:
    """The findings on an app's objects (App.advice); none for an app on an environment,
    which the advisor does not read."""
    return await _page(context, advice_reads.BY_APP, app.id, found, first, after)


async def card_counts(context: Context, cloud_space_id: str) -> dict[str, int]:
    """The open findings by severity (not dismissed): what a CloudSpace card shows."""
    require_view(context)
    return await _counts(context, advice_reads.BY_CLOUD_SPACE, cloud_space_id, AdviceFilter())


async def schedule(context: Context, cloud_space_id: str) -> AdvisorSchedule | None:
    require_view(context)
    return await context.loaders.advisor_schedule.load(cloud_space_id)


async def exemptions(context: Context, cloud_space_id: str) -> list[AdvisorExemption]:
    return await context.loaders.advisor_exemptions.load(cloud_space_id)


async def finding(context: Context, finding_id: str) -> AdvisorFinding | None:
    return await context.loaders.advisor_finding.load(finding_id)


# -- mutations -------------------------------------------------------------------------
async def dismiss(context: Context, finding_id: str, reason: str) -> Outcome[AdvisorFinding]:
    return await run(context, lambda unit, viewer: advice.dismiss(unit, viewer, finding_id, reason))


async def restore(context: Context, finding_id: str, reason: str) -> Outcome[AdvisorFinding]:
    return await run(context, lambda unit, viewer: advice.restore(unit, viewer, finding_id, reason))


async def exempt(
    context: Context, cloud_space_id: str, rule_id: str, reason: str
) -> Outcome[AdvisorExemption]:
    return await run(
        context, lambda unit, viewer: advice.exempt(unit, viewer, cloud_space_id, rule_id, reason)
    )


async def lift(context: Context, cloud_space_id: str, rule_id: str) -> Outcome[AdvisorExemption]:
    return await run(
        context, lambda unit, viewer: advice.lift_exemption(unit, viewer, cloud_space_id, rule_id)
    )


# -- the subscription --------------------------------------------------------------------
@dataclass(frozen=True)
class Changed:
    cloud_space_id: str
    change: str
    finding: AdvisorFinding
    event: int
    at: datetime


async def changes(
    context: Context, mode: SubscriptionMode, cloud_space_id: str
) -> AsyncGenerator[Changed, None]:
    """Every change of the CloudSpace's findings, each with the finding as it is now,
    until the subscriber goes away. A foreign or unknown CloudSpace is NOT_FOUND."""
    caller = context.caller
    caller.require_to_read("cloudspace:view")
    require_view(context)
    context.fresh_loaders()
    if await context.loaders.cloud_space.load(cloud_space_id) is None:
        raise ApiError("NOT_FOUND", f"No CloudSpace with id {cloud_space_id!r}.")
    if mode.admit_only:
        return
    bus = context.services.bus
    async with aclosing(bus.subscribe(ADVICE_CHANGED, mode.on_listening)) as announcements:
        async for announced in announcements:
            if announced.get("org_id") != caller.org_id:
                continue
            if announced.get("cloud_space_id") != cloud_space_id:
                continue
            event_id = int(announced["event_id"])
            loaders = context.fresh_loaders(f"{ADVICE_CHANGED}:{event_id}")
            async with loaders.reading() as session:
                batch = await advice_reads.change_batch(session, event_id)
            if batch is None or batch.org_id != caller.org_id:
                continue
            listed = advice_reads.changes_of(batch)
            rows = await loaders.advisor_finding.load_many([finding_id for finding_id, _ in listed])
            for (_, change), row in zip(listed, rows, strict=True):
                if row is not None:
                    yield Changed(cloud_space_id, change, row, event_id, batch.at)
