"""The persisted event histories read back as the bus announced them, for replay.

NOTIFY has no replay: what a replica did not hear while its LISTEN connection was down
is only in these tables. core.common.event_replay reads the announcements after the last id a
replica fanned out, in id order, in the same shape the publishers sent them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from db.advisor_tables import AdviceEvent
from db.app_tables import AppEvent
from db.cloudspace_tables import CloudSpaceEvent
from db.spaces import EVENTS_KEPT_PER_SPACE
from db.tables import SpaceStatusEvent


async def latest_status_event_id(session: AsyncSession) -> int:
    found = await session.scalar(sa.select(sa.func.max(col(SpaceStatusEvent.id))))
    return int(found or 0)


async def latest_cloud_space_event_id(session: AsyncSession) -> int:
    found = await session.scalar(sa.select(sa.func.max(col(CloudSpaceEvent.id))))
    return int(found or 0)


async def status_events_after(
    session: AsyncSession, after: int, limit: int
) -> Sequence[dict[str, Any]]:
    """Announcements of the status events after `after`, oldest first, at most `limit`."""
    query = (
        sa.select(
            col(SpaceStatusEvent.id), col(SpaceStatusEvent.space_id), col(SpaceStatusEvent.org_id)
        )
        .where(col(SpaceStatusEvent.id) > after)
        .order_by(col(SpaceStatusEvent.id))
        .limit(limit)
    )
    rows = (await session.execute(query)).all()
    return [{"event_id": id_, "space_id": space, "org_id": org} for id_, space, org in rows]


async def status_events_may_be_trimmed(session: AsyncSession, after: int) -> bool:
    """Whether some space has a full history after `after`: older events of it (after
    `after` too) may have been dropped by the per-space limit, so a replay would skip them."""
    query = (
        sa.select(col(SpaceStatusEvent.space_id))
        .where(col(SpaceStatusEvent.id) > after)
        .group_by(col(SpaceStatusEvent.space_id))
        .having(sa.func.count() >= EVENTS_KEPT_PER_SPACE)
        .limit(1)
    )
    return (await session.scalar(query)) is not None


async def cloud_space_events_after(
    session: AsyncSession, after: int, limit: int
) -> Sequence[dict[str, Any]]:
    """Announcements of the CloudSpace events after `after`, oldest first (never trimmed)."""
    query = (
        sa.select(
            col(CloudSpaceEvent.id),
            col(CloudSpaceEvent.cloud_space_id),
            col(CloudSpaceEvent.org_id),
        )
        .where(col(CloudSpaceEvent.id) > after)
        .order_by(col(CloudSpaceEvent.id))
        .limit(limit)
    )
    rows = (await session.execute(query)).all()
    return [
        {"event_id": id_, "cloud_space_id": cloud_space, "org_id": org}
        for id_, cloud_space, org in rows
    ]


async def latest_app_event_id(session: AsyncSession) -> int:
    found = await session.scalar(sa.select(sa.func.max(col(AppEvent.id))))
    return int(found or 0)


async def app_events_after(
    session: AsyncSession, after: int, limit: int
) -> Sequence[dict[str, Any]]:
    """Announcements of the app events after `after`, oldest first (never trimmed)."""
    query = (
        sa.select(
            col(AppEvent.id),
            col(AppEvent.app_id),
            col(AppEvent.org_id),
            col(AppEvent.cloud_space_id),
            col(AppEvent.environment_id),
        )
        .where(col(AppEvent.id) > after)
        .order_by(col(AppEvent.id))
        .limit(limit)
    )
    rows = (await session.execute(query)).all()
    return [
        {
            "event_id": id_,
            "app_id": app,
            "org_id": org,
            "cloud_space_id": cloud_space,
            "environment_id": environment,
        }
        for id_, app, org, cloud_space, environment in rows
    ]


async def latest_advice_event_id(session: AsyncSession) -> int:
    found = await session.scalar(sa.select(sa.func.max(col(AdviceEvent.id))))
    return int(found or 0)


async def advice_events_after(
    session: AsyncSession, after: int, limit: int
) -> Sequence[dict[str, Any]]:
    """Announcements of the advice batches after `after`, oldest first."""
    query = (
        sa.select(col(AdviceEvent.id), col(AdviceEvent.cloud_space_id), col(AdviceEvent.org_id))
        .where(col(AdviceEvent.id) > after)
        .order_by(col(AdviceEvent.id))
        .limit(limit)
    )
    rows = (await session.execute(query)).all()
    return [
        {"event_id": id_, "cloud_space_id": cloud_space, "org_id": org}
        for id_, cloud_space, org in rows
    ]
