"""The audit log's queries: save (insert or update one call's event), a page, pruning."""

from __future__ import annotations

import json
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from db.access_tables import AuditEvent
from db.pages import Page, page
from db.records import AuditWhere


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
    if where.actor_token_id is not None:
        query = query.where(col(AuditEvent.actor_token_id) == where.actor_token_id)
    if where.target_id is not None:
        # target_ids_json is a JSON list of ids: the id is looked for as JSON writes it,
        # quotes included, with LIKE's wildcards (`%`, `_`) matched literally.
        quoted = json.dumps(where.target_id)
        query = query.where(col(AuditEvent.target_ids_json).contains(quoted, autoescape=True))
    if where.since is not None:
        query = query.where(col(AuditEvent.at) >= where.since)
    if where.via is not None:
        query = query.where(col(AuditEvent.via) == where.via)
    return await page(session, query, AuditEvent.id, first, after)


async def prune(session: AsyncSession, before: datetime) -> int:
    """Deletes every org's events older than `before`; how many went."""
    result = await session.execute(sa.delete(AuditEvent).where(col(AuditEvent.at) < before))
    return int(getattr(result, "rowcount", 0) or 0)
