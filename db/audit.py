"""The audit log's queries: save (insert or update one call's event), a page, pruning."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from db.pages import Page, page
from db.tables import AuditEvent


@dataclass(frozen=True)
class AuditWhere:
    actor: str | None = None
    action: str | None = None
    target_id: str | None = None
    since: datetime | None = None


async def save(session: AsyncSession, event: AuditEvent) -> None:
    """Inserts the event, or updates it when its call already wrote one (a later step)."""
    await session.merge(event)
    await session.flush()


async def events_page(
    session: AsyncSession, org_id: str, where: AuditWhere, first: int, after: str | None
) -> Page[AuditEvent]:
    query = sa.select(AuditEvent).where(col(AuditEvent.org_id) == org_id)
    if where.actor is not None:
        query = query.where(col(AuditEvent.actor) == where.actor)
    if where.action is not None:
        query = query.where(col(AuditEvent.action) == where.action)
    if where.target_id is not None:
        # target_ids_json is a JSON list of quoted ids; ids hold no quotes or wildcards.
        query = query.where(col(AuditEvent.target_ids_json).contains(f'"{where.target_id}"'))
    if where.since is not None:
        query = query.where(col(AuditEvent.at) >= where.since)
    return await page(session, query, AuditEvent.id, first, after)


async def prune(session: AsyncSession, before: datetime) -> int:
    """Deletes every org's events older than `before`; how many went."""
    result = await session.execute(sa.delete(AuditEvent).where(col(AuditEvent.at) < before))
    return int(getattr(result, "rowcount", 0) or 0)
