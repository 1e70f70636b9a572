"""Apps' SQL: lookups, their revisions, the two work queues, pages by CloudSpace and by
environment, and the event history.

The delivery worker claims apps through `db.claims` on DELIVERY_QUEUE with a lease, as the
CloudSpace reconciler does, and fences every write on it (`locked_if_claimed`). The status
loop claims apps on STATUS_QUEUE like probes: the claim moves their due time by an
interval, and its writes touch only the status columns.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from db.app_tables import App, AppEvent, AppRevision
from db.claims import WorkQueue
from db.owned import storable
from db.pages import Page, pages_by_parent

DELIVERY_QUEUE = WorkQueue(
    model=App,
    id=col(App.id),
    due=col(App.delivery_due_at),
    claimed_by=col(App.claimed_by),
    lease_until=col(App.lease_until),
)
STATUS_QUEUE = WorkQueue(model=App, id=col(App.id), due=col(App.status_due_at))


def _is_sqlite(session: AsyncSession) -> bool:
    return session.get_bind().dialect.name == "sqlite"


async def by_target_name(
    session: AsyncSession, org_id: str, target_key: str, name: str
) -> App | None:
    query = sa.select(App).where(
        col(App.org_id) == org_id, col(App.target_key) == target_key, col(App.name) == name
    )
    return (await session.scalars(query)).first()


async def lock(session: AsyncSession, app_id: str) -> App | None:
    """The current row, locked until commit (on SQLite: the write lock, taken first)."""
    if _is_sqlite(session):
        await session.execute(sa.update(App).where(sa.false()).values(suspended=App.suspended))
    query = sa.select(App).where(col(App.id) == app_id)
    if not _is_sqlite(session):
        query = query.with_for_update()
    return (await session.scalars(query.execution_options(populate_existing=True))).first()


async def locked_many(session: AsyncSession, app_ids: Sequence[str]) -> Sequence[App]:
    """The apps as they are now, locked until commit, in id order (so two writers lock
    alike); on SQLite the transaction's write lock stands for the row locks."""
    query = sa.select(App).where(col(App.id).in_(app_ids)).order_by(col(App.id))
    if not _is_sqlite(session):
        query = query.with_for_update()
    return (await session.scalars(query.execution_options(populate_existing=True))).all()


async def locked_if_claimed(session: AsyncSession, app_id: str, owner: str) -> App | None:
    """The locked row while `owner` holds its delivery lease; None when it lost it."""
    row = await lock(session, app_id)
    return row if row is not None and row.claimed_by == owner else None


async def release_all(session: AsyncSession, owner: str, now: datetime) -> None:
    """Ends every lease `owner` holds, so its apps are due again at once."""
    await session.execute(
        sa.update(App)
        .where(col(App.claimed_by) == owner)
        .values(claimed_by=None, lease_until=None, delivery_due_at=now)
    )


async def earliest_delivery(session: AsyncSession) -> datetime | None:
    found: datetime | None = await session.scalar(sa.select(sa.func.min(App.delivery_due_at)))
    return found


async def earliest_status(session: AsyncSession) -> datetime | None:
    found: datetime | None = await session.scalar(sa.select(sa.func.min(App.status_due_at)))
    return found


async def update(session: AsyncSession, app_id: str, **values: Any) -> None:
    await session.execute(sa.update(App).where(col(App.id) == app_id).values(**values))


async def delete(session: AsyncSession, app_id: str) -> None:
    await session.execute(sa.delete(AppRevision).where(col(AppRevision.app_id) == app_id))
    await session.execute(sa.delete(App).where(col(App.id) == app_id))


# -- revisions -----------------------------------------------------------------
async def add_revision(session: AsyncSession, revision: AppRevision) -> None:
    session.add(revision)
    await session.flush()


async def revision(session: AsyncSession, org_id: str, revision_id: str) -> AppRevision | None:
    if not storable(revision_id):
        return None
    query = sa.select(AppRevision).where(
        col(AppRevision.id) == revision_id, col(AppRevision.org_id) == org_id
    )
    return (await session.scalars(query)).first()


async def revisions_by_ids(
    session: AsyncSession, org_id: str, ids: Sequence[str]
) -> Sequence[AppRevision]:
    ids = [key for key in ids if storable(key)]
    if not ids:
        return []
    query = sa.select(AppRevision).where(
        col(AppRevision.id).in_(ids), col(AppRevision.org_id) == org_id
    )
    return (await session.scalars(query)).all()


async def by_number(session: AsyncSession, app_id: str, number: int) -> AppRevision | None:
    query = sa.select(AppRevision).where(
        col(AppRevision.app_id) == app_id, col(AppRevision.number) == number
    )
    return (await session.scalars(query)).first()


async def first_in_states(
    session: AsyncSession, app_id: str, states: Sequence[str]
) -> AppRevision | None:
    """The app's oldest revision in one of `states`."""
    query = (
        sa.select(AppRevision)
        .where(col(AppRevision.app_id) == app_id, col(AppRevision.state).in_(states))
        .order_by(col(AppRevision.number))
        .limit(1)
    )
    return (await session.scalars(query)).first()


async def in_states(
    session: AsyncSession, app_ids: Sequence[str], states: Sequence[str]
) -> Sequence[AppRevision]:
    """The revisions of these apps in one of `states`, oldest first."""
    if not app_ids:
        return []
    query = (
        sa.select(AppRevision)
        .where(col(AppRevision.app_id).in_(app_ids), col(AppRevision.state).in_(states))
        .order_by(col(AppRevision.app_id), col(AppRevision.number))
    )
    return (await session.scalars(query)).all()


async def latest_revisions(session: AsyncSession, app_ids: Sequence[str]) -> Sequence[AppRevision]:
    """Each app's newest revision."""
    if not app_ids:
        return []
    newest = (
        sa.select(col(AppRevision.app_id), sa.func.max(AppRevision.number).label("number"))
        .where(col(AppRevision.app_id).in_(app_ids))
        .group_by(col(AppRevision.app_id))
        .subquery()
    )
    query = sa.select(AppRevision).join(
        newest,
        sa.and_(
            col(AppRevision.app_id) == newest.c.app_id, col(AppRevision.number) == newest.c.number
        ),
    )
    return (await session.scalars(query)).all()


async def revision_pages(
    session: AsyncSession, app_ids: Sequence[str], first: int, after: str | None
) -> dict[str, Page[Any]]:
    """A page of each app's revisions, newest first: two statements for any number of apps."""
    return await pages_by_parent(
        session, AppRevision, AppRevision.app_id, app_ids, first, after, newest_first=True
    )


# -- apps by target -----------------------------------------------------------
async def app_pages(
    session: AsyncSession,
    org_id: str,
    parent: Any,
    parent_ids: Sequence[str],
    first: int,
    after: str | None,
) -> dict[str, Page[Any]]:
    """A page of the apps of each CloudSpace (`parent` App.cloud_space_id) or environment
    (App.environment_id), oldest first: two statements for any number of them."""
    return await pages_by_parent(
        session, App, parent, parent_ids, first, after, col(App.org_id) == org_id
    )


def org_apps(org_id: str, cloud_space_id: str | None, environment_id: str | None) -> sa.Select[Any]:
    """The org's apps, of one CloudSpace or environment when given (a query to page)."""
    query = sa.select(App).where(col(App.org_id) == org_id)
    if cloud_space_id is not None:
        query = query.where(col(App.cloud_space_id) == cloud_space_id)
    if environment_id is not None:
        query = query.where(col(App.environment_id) == environment_id)
    return query


# -- events --------------------------------------------------------------------
async def add_event(session: AsyncSession, event: AppEvent) -> AppEvent:
    session.add(event)
    await session.flush()
    return event


async def events_by_ids(session: AsyncSession, ids: Sequence[int]) -> Sequence[AppEvent]:
    query = sa.select(AppEvent).where(col(AppEvent.id).in_(ids))
    return (await session.scalars(query)).all()
