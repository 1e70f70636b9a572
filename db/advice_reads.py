"""Reading the App Advisor's findings for the API: pages in severity order (most severe
first, then oldest first), counts by severity, and the same for a page of CloudSpaces (or of
apps) at once, in a fixed number of statements whatever the number of them.

A list of findings belongs to a parent: a CloudSpace (`BY_CLOUD_SPACE`, its findings) or an
app (`BY_APP`, the findings on its inventory's objects)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from db.advisor_tables import AdviceEvent, AdvisorExemption, AdvisorFinding
from db.pages import Keyset, Order, Page, ordered_page


@dataclass(frozen=True)
class AdviceFilter:
    severity: str | None = None
    app_id: str | None = None
    include_resolved: bool = False
    include_dismissed: bool = False

    def without_severity(self) -> AdviceFilter:
        return AdviceFilter(None, self.app_id, self.include_resolved, self.include_dismissed)


BY_CLOUD_SPACE = "cloud_space_id"
BY_APP = "app_id"


def _parent(by: str) -> Any:
    return (
        col(AdvisorFinding.cloud_space_id) if by == BY_CLOUD_SPACE else col(AdvisorFinding.app_id)
    )


def _where(org_id: str, found: AdviceFilter) -> list[sa.ColumnElement[bool]]:
    conditions = [col(AdvisorFinding.org_id) == org_id]
    if found.severity is not None:
        conditions.append(col(AdvisorFinding.severity) == found.severity)
    if found.app_id is not None:
        conditions.append(col(AdvisorFinding.app_id) == found.app_id)
    if not found.include_resolved:
        conditions.append(col(AdvisorFinding.resolved_at).is_(None))
    if not found.include_dismissed:
        conditions.append(col(AdvisorFinding.dismissed_at).is_(None))
    return conditions


async def counts(
    session: AsyncSession, org_id: str, by: str, parent_ids: Sequence[str], found: AdviceFilter
) -> dict[str, dict[str, int]]:
    """{parent id: {severity: count}} for the parents asked, in one statement."""
    parent = _parent(by)
    query = (
        sa.select(parent, col(AdvisorFinding.severity), sa.func.count())
        .where(parent.in_(parent_ids), *_where(org_id, found))
        .group_by(parent, col(AdvisorFinding.severity))
    )
    result: dict[str, dict[str, int]] = {key: {} for key in parent_ids}
    for parent_id, severity, count in (await session.execute(query)).all():
        result[parent_id][severity] = int(count)
    return result


ORDER = Order(key=col(AdvisorFinding.severity_order))  # type: ignore[arg-type]


async def first_pages(
    session: AsyncSession,
    org_id: str,
    by: str,
    parent_ids: Sequence[str],
    found: AdviceFilter,
    first: int,
) -> dict[str, list[AdvisorFinding]]:
    """The first `first + 1` findings of each parent (one more tells whether more
    follow), in list order, in one statement."""
    parent = _parent(by)
    rank = (
        sa.func.row_number()
        .over(
            partition_by=parent,
            order_by=(col(AdvisorFinding.severity_order), col(AdvisorFinding.id)),
        )
        .label("rank")
    )
    ranked = (
        sa.select(AdvisorFinding, rank)
        .where(parent.in_(parent_ids), *_where(org_id, found))
        .subquery()
    )
    finding = sa.orm.aliased(AdvisorFinding, ranked)
    query = (
        sa.select(finding)
        .where(ranked.c.rank <= first + 1)
        .order_by(ranked.c[by], ranked.c.severity_order, ranked.c.id)
    )
    grouped: dict[str, list[AdvisorFinding]] = {key: [] for key in parent_ids}
    for row in (await session.scalars(query)).all():
        grouped[getattr(row, by)].append(row)
    return grouped


async def page(
    session: AsyncSession, org_id: str, by: str, parent_id: str, found: AdviceFilter, keyset: Keyset
) -> Page[AdvisorFinding]:
    """One page of a parent's findings from a position (or read backwards)."""
    query = sa.select(AdvisorFinding).where(_parent(by) == parent_id, *_where(org_id, found))
    return await ordered_page(session, query, col(AdvisorFinding.id), ORDER, keyset)


async def change_batch(session: AsyncSession, event_id: int) -> AdviceEvent | None:
    return await session.get(AdviceEvent, event_id)


def changes_of(event: AdviceEvent) -> list[tuple[str, str]]:
    return [(str(finding_id), str(change)) for finding_id, change in json.loads(event.changes_json)]


async def exemptions(
    session: AsyncSession, cloud_space_ids: Sequence[str]
) -> Sequence[AdvisorExemption]:
    query = (
        sa.select(AdvisorExemption)
        .where(col(AdvisorExemption.cloud_space_id).in_(cloud_space_ids))
        .order_by(col(AdvisorExemption.cloud_space_id), col(AdvisorExemption.rule_id))
    )
    return (await session.scalars(query)).all()
