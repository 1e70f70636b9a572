"""CloudSpaces' SQL: lookups, what a host has promised, the reconciler's leases and the
phase history.

The reconciler claims through `db.claims` on RECONCILE_QUEUE: due rows whose lease
is free or lapsed, with the claimer's name and lease written in the same statement,
so two reconcilers never work on one CloudSpace at once. Every later write of the
claimer is fenced on `claimed_by`: a reconciler whose lease lapsed and was taken
over writes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from db.claims import WorkQueue
from db.cloudspace_tables import CloudSpace, CloudSpaceEvent
from db.pages import Keyset, Order, Page, ordered_page, substring_pattern
from db.records import CloudSpaceWhere
from db.tables import Space
from db.vcluster_tables import VCluster

# The reconciler's work: CloudSpaces whose next attempt is due, leased while a worker runs.
RECONCILE_QUEUE = WorkQueue(
    model=CloudSpace,
    id=col(CloudSpace.id),
    due=col(CloudSpace.next_attempt_at),
    claimed_by=col(CloudSpace.claimed_by),
    lease_until=col(CloudSpace.lease_until),
)


def _is_sqlite(session: AsyncSession) -> bool:
    return session.get_bind().dialect.name == "sqlite"


async def of_spaces(
    session: AsyncSession, org_id: str, space_ids: Sequence[str]
) -> Sequence[CloudSpace]:
    """The org's CloudSpaces hosted on these spaces, oldest first."""
    query = (
        sa.select(CloudSpace)
        .where(col(CloudSpace.org_id) == org_id, col(CloudSpace.host_space_id).in_(space_ids))
        .order_by(col(CloudSpace.id))
    )
    return (await session.scalars(query)).all()


def _listed(org_id: str, where: CloudSpaceWhere) -> sa.Select[Any]:
    query = sa.select(CloudSpace).where(col(CloudSpace.org_id) == org_id)
    if where.phases is not None:
        query = query.where(col(CloudSpace.phase).in_(where.phases))
    if where.host_space_ids is not None:
        own_hosts = sa.select(col(Space.id)).where(
            col(Space.org_id) == org_id, col(Space.id).in_(where.host_space_ids)
        )
        query = query.where(col(CloudSpace.host_space_id).in_(own_hosts))
    if where.search:
        pattern = substring_pattern(where.search)
        query = query.where(col(CloudSpace.name).ilike(pattern, escape="\\"))
    return query


def order_key(field: str, phases: Sequence[str]) -> Any:
    """The sort key of CloudSpaceOrderField `field` (PHASE: the place in `phases`)."""
    if field == "NAME":
        return col(CloudSpace.name)
    if field == "CREATED_AT":
        return col(CloudSpace.created_at)
    if field == "PHASE":
        places = {phase: place for place, phase in enumerate(phases)}
        return sa.case(places, value=col(CloudSpace.phase), else_=len(places))
    raise ValueError(f"no CloudSpace order {field!r}")


async def list_cloud_spaces(
    session: AsyncSession,
    org_id: str,
    where: CloudSpaceWhere,
    keyset: Keyset,
    order: Order,
) -> Page[CloudSpace]:
    """A page of the org's CloudSpaces under `order` (then id), and how many match."""
    return await ordered_page(session, _listed(org_id, where), col(CloudSpace.id), order, keyset)


async def count_on_space(session: AsyncSession, space_id: str) -> int:
    """CloudSpaces of any org that live on the space (deleting ones included)."""
    query = sa.select(sa.func.count()).where(col(CloudSpace.host_space_id) == space_id)
    return int(await session.scalar(query) or 0)


@dataclass(frozen=True)
class Promised:
    """What CloudSpaces on a host were promised: their quotas' sums, how many CloudSpaces,
    and how many vClusters (each runs its own control plane and Flux on the host)."""

    cpu: float
    memory_mib: int
    cloud_spaces: int
    vclusters: int


async def promised_on_host(
    session: AsyncSession, host_space_id: str, except_id: str | None, org_id: str | None = None
) -> Promised:
    """What the CloudSpaces on the host were promised, of any org (or of `org_id`'s only),
    leaving out `except_id`."""
    where = [col(CloudSpace.host_space_id) == host_space_id]
    if except_id is not None:
        where.append(col(CloudSpace.id) != except_id)
    if org_id is not None:
        where.append(col(CloudSpace.org_id) == org_id)
    vclusters = (
        sa.select(sa.func.count())
        .select_from(VCluster)
        .join(CloudSpace, col(CloudSpace.id) == col(VCluster.cloud_space_id))
        .where(*where)
        .scalar_subquery()
    )
    query = sa.select(
        sa.func.coalesce(sa.func.sum(CloudSpace.cpu), 0.0),
        sa.func.coalesce(sa.func.sum(CloudSpace.memory_mib), 0),
        sa.func.count(),
        vclusters,
    ).where(*where)
    cpu, memory, count, vcluster_count = (await session.execute(query)).one()
    return Promised(float(cpu), int(memory), int(count), int(vcluster_count))


async def vcluster_count(session: AsyncSession, cloud_space_id: str) -> int:
    """How many vClusters the CloudSpace runs (those being removed too, until they are)."""
    query = sa.select(sa.func.count()).where(col(VCluster.cloud_space_id) == cloud_space_id)
    return int((await session.execute(query)).scalar_one())


async def host_space(session: AsyncSession, space_id: str) -> Space | None:
    """The host space of a CloudSpace, whatever org owns it (the reconciler's view)."""
    return await session.get(Space, space_id)


async def earliest_due(session: AsyncSession) -> datetime | None:
    query = sa.select(sa.func.min(CloudSpace.next_attempt_at))
    earliest: datetime | None = (await session.execute(query)).scalar_one_or_none()
    return earliest


async def lock(session: AsyncSession, cloud_space_id: str) -> CloudSpace | None:
    """The current row, locked until commit (on SQLite: the write lock, taken first)."""
    if _is_sqlite(session):
        await session.execute(
            sa.update(CloudSpace).where(sa.false()).values(failures=CloudSpace.failures)
        )
    query = sa.select(CloudSpace).where(col(CloudSpace.id) == cloud_space_id)
    if not _is_sqlite(session):
        query = query.with_for_update()
    query = query.execution_options(populate_existing=True)
    return (await session.scalars(query)).first()


async def locked_if_claimed(
    session: AsyncSession, cloud_space_id: str, owner: str
) -> CloudSpace | None:
    """The locked row while `owner` still holds its lease; None when it lost it or the row
    is gone."""
    row = await lock(session, cloud_space_id)
    return row if row is not None and row.claimed_by == owner else None


async def update(session: AsyncSession, cloud_space_id: str, **values: Any) -> None:
    await session.execute(
        sa.update(CloudSpace).where(col(CloudSpace.id) == cloud_space_id).values(**values)
    )


async def add_event(session: AsyncSession, event: CloudSpaceEvent) -> CloudSpaceEvent:
    session.add(event)
    await session.flush()
    return event


async def events_by_ids(session: AsyncSession, ids: Sequence[int]) -> Sequence[CloudSpaceEvent]:
    query = sa.select(CloudSpaceEvent).where(col(CloudSpaceEvent.id).in_(ids))
    return (await session.scalars(query)).all()


async def delete(session: AsyncSession, cloud_space_id: str) -> None:
    await session.execute(sa.delete(CloudSpace).where(col(CloudSpace.id) == cloud_space_id))


async def release_all(session: AsyncSession, owner: str, now: datetime) -> int:
    """Ends every lease `owner` still holds, so its CloudSpaces are due again at once; how
    many it held."""
    result = await session.execute(
        sa.update(CloudSpace)
        .where(col(CloudSpace.claimed_by) == owner)
        .values(claimed_by=None, lease_until=None, next_attempt_at=now)
        .execution_options(synchronize_session=False)
    )
    return int(result.rowcount)  # type: ignore[attr-defined]


async def renew_lease(
    session: AsyncSession, cloud_space_id: str, owner: str, lease_until: datetime
) -> bool:
    """Extends `owner`'s lease on the CloudSpace; False when `owner` no longer holds it
    (another reconciler took it over, or the row is gone)."""
    result = await session.execute(
        sa.update(CloudSpace)
        .where(col(CloudSpace.id) == cloud_space_id, col(CloudSpace.claimed_by) == owner)
        .values(lease_until=lease_until)
        .execution_options(synchronize_session=False)
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]
