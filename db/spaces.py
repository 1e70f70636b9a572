"""Spaces, their status history, and the queries the probe loop and pickers need."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from db.pages import Page, page
from db.tables import Space, SpaceStatusEvent

EVENTS_KEPT_PER_SPACE = 1000
LIVE = col(Space.deregistered_at).is_(None)


def effective_status(stale_before: datetime) -> sa.ColumnElement[str]:
    """The health rule in SQL; `core.health.HealthRule.status_of` is the same rule in Python."""
    return sa.case(
        (col(Space.held), "INACTIVE"),
        # A deregistered space is no longer probed: it keeps its last verdict, never stale.
        (
            sa.and_(LIVE, sa.func.coalesce(Space.last_probe_at, Space.created_at) < stale_before),
            "UNKNOWN",
        ),
        else_=Space.probe_status,
    )


async def spaces_by_ids(
    session: AsyncSession, org_id: str | None, ids: Sequence[str]
) -> Sequence[Space]:
    """Spaces by id, deregistered ones included; org_id None only for internal loops."""
    query = sa.select(Space).where(col(Space.id).in_(ids))
    if org_id is not None:
        query = query.where(col(Space.org_id) == org_id)
    return (await session.scalars(query)).all()


async def live_space_where(session: AsyncSession, org_id: str, **equal: str) -> Space | None:
    query = sa.select(Space).where(col(Space.org_id) == org_id, LIVE)
    for column, value in equal.items():
        query = query.where(getattr(Space, column) == value)
    return (await session.scalars(query)).first()


async def list_spaces(
    session: AsyncSession,
    org_id: str,
    first: int,
    after: str | None,
    *,
    stale_before: datetime,
    statuses: Sequence[str] | None = None,
    provider: str | None = None,
    scalable: bool | None = None,
    include_deregistered: bool = False,
    cloud_account_id: str | None = None,
) -> Page[Space]:
    query = sa.select(Space).where(col(Space.org_id) == org_id)
    status = effective_status(stale_before)
    if not include_deregistered or scalable:
        query = query.where(LIVE)
    if statuses is not None:
        query = query.where(status.in_(statuses))
    if provider is not None:
        query = query.where(col(Space.provider) == provider)
    if scalable is True:
        query = query.where(sa.not_(col(Space.synthetic)), status == "ACTIVE")
    elif scalable is False:
        query = query.where(sa.or_(col(Space.synthetic), status != "ACTIVE"))
    if cloud_account_id is not None:
        query = query.where(col(Space.cloud_account_id) == cloud_account_id)
    return await page(session, query, Space.id, first, after)


async def add_event(session: AsyncSession, event: SpaceStatusEvent) -> SpaceStatusEvent:
    session.add(event)
    await session.flush()
    # Keep the newest EVENTS_KEPT_PER_SPACE per space; older history is dropped.
    cutoff = (
        sa.select(col(SpaceStatusEvent.id))
        .where(col(SpaceStatusEvent.space_id) == event.space_id)
        .order_by(sa.desc(col(SpaceStatusEvent.id)))
        .offset(EVENTS_KEPT_PER_SPACE)
        .limit(1)
        .scalar_subquery()
    )
    await session.execute(
        sa.delete(SpaceStatusEvent).where(
            col(SpaceStatusEvent.space_id) == event.space_id, col(SpaceStatusEvent.id) <= cutoff
        )
    )
    return event


async def events_by_ids(session: AsyncSession, ids: Sequence[int]) -> Sequence[SpaceStatusEvent]:
    query = sa.select(SpaceStatusEvent).where(col(SpaceStatusEvent.id).in_(ids))
    return (await session.scalars(query)).all()


async def recent_events(
    session: AsyncSession, space_ids: Sequence[str], first: int
) -> dict[str, list[SpaceStatusEvent]]:
    """The newest `first` events of each space, in one query."""
    rank = (
        sa.func.row_number()
        .over(partition_by=SpaceStatusEvent.space_id, order_by=sa.desc(col(SpaceStatusEvent.id)))
        .label("rank")
    )
    ranked = (
        sa.select(SpaceStatusEvent, rank)
        .where(col(SpaceStatusEvent.space_id).in_(space_ids))
        .subquery()
    )
    event = sa.orm.aliased(SpaceStatusEvent, ranked)
    query = sa.select(event).where(ranked.c.rank <= first).order_by(sa.desc(ranked.c.id))
    grouped: dict[str, list[SpaceStatusEvent]] = defaultdict(list)
    for row in (await session.scalars(query)).all():
        grouped[row.space_id].append(row)
    return grouped


async def update(session: AsyncSession, space_id: str, **values: Any) -> None:
    await session.execute(sa.update(Space).where(col(Space.id) == space_id).values(**values))
