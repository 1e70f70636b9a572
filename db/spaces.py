"""Spaces, their status history, and the queries the probe loop and pickers need."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from db.cloud_accounts import CloudAccountRecord
from db.pages import Keyset, Order, Page, ordered_page
from db.tables import CloudAccount, Space, SpaceStatusEvent, UtcDateTime

EVENTS_KEPT_PER_SPACE = 1000
LIVE = col(Space.deregistered_at).is_(None)


def effective_status(stale_before: datetime) -> sa.ColumnElement[str]:
    """The health rule in SQL; `core.health.HealthRule.status_of` is the same rule in Python."""
    return sa.case(
        # A deregistered space reads INACTIVE ("deregistered") from then on.
        (sa.not_(LIVE), "INACTIVE"),
        (col(Space.held), "INACTIVE"),
        (sa.func.coalesce(Space.last_probe_at, Space.created_at) < stale_before, "UNKNOWN"),
        else_=Space.probe_status,
    )


async def live_space_where(session: AsyncSession, org_id: str, **equal: str) -> Space | None:
    query = sa.select(Space).where(col(Space.org_id) == org_id, LIVE)
    for column, value in equal.items():
        query = query.where(getattr(Space, column) == value)
    return (await session.scalars(query)).first()


@dataclass(frozen=True)
class SpaceWhere:
    """Which spaces a list or count covers; every condition given must hold."""

    statuses: Sequence[str] | None = None
    provider: str | None = None
    providers: Sequence[str] | None = None
    cloud_account_ids: Sequence[str] | None = None
    held: bool | None = None
    search: str | None = None
    scalable: bool | None = None
    include_deregistered: bool = False


class SpaceRecord(NamedTuple):
    """A space as a page of spaces shows it: the columns reads use, in a tuple, no ORM
    object to build and track (issue 12). Read-only code takes either (`SpaceRow`)."""

    id: str
    org_id: str
    name: str
    provider: str
    space_type: str
    cloud_account_id: str | None
    config_json: str
    secret_ciphertext: str | None
    synthetic: bool
    probe_status: str
    held: bool
    consecutive_failures: int
    last_probe_at: datetime | None
    last_probe_ok: bool | None
    last_probe_version: str | None
    last_probe_latency_ms: float | None
    last_probe_error: str | None
    last_probe_error_code: str | None
    created_at: datetime
    deregistered_at: datetime | None
    # Its cloud account, when the page was read with them (`list_spaces(with_accounts=)`).
    account: CloudAccountRecord | None = None


SpaceRow = Space | SpaceRecord
_SPACE_COLUMNS = SpaceRecord._fields[:-1]
_ACCOUNT_COLUMNS = CloudAccountRecord._fields


def _space_record(row: Sequence[Any]) -> SpaceRecord:
    return SpaceRecord(*row[: len(_SPACE_COLUMNS)])


def _space_with_account(row: Sequence[Any]) -> SpaceRecord:
    start, end = len(_SPACE_COLUMNS), len(_SPACE_COLUMNS) + len(_ACCOUNT_COLUMNS)
    account = None if row[start] is None else CloudAccountRecord._make(row[start:end])
    return SpaceRecord._make([*row[:start], account])


def _name_contains(text: str) -> sa.ColumnElement[bool]:
    """Case-insensitive substring; on Postgres the trigram index on name serves it."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return col(Space.name).ilike(f"%{escaped}%", escape="\\")


def _spaces_where(org_id: str, where: SpaceWhere, stale_before: datetime) -> sa.Select[Any]:
    query = sa.select(Space).where(col(Space.org_id) == org_id)
    status = effective_status(stale_before)
    if not where.include_deregistered or where.scalable:
        query = query.where(LIVE)
    if where.statuses is not None:
        query = query.where(status.in_(where.statuses))
    if where.provider is not None:
        query = query.where(col(Space.provider) == where.provider)
    if where.providers is not None:
        query = query.where(col(Space.provider).in_(where.providers))
    if where.cloud_account_ids is not None:
        query = query.where(col(Space.cloud_account_id).in_(where.cloud_account_ids))
    if where.held is not None:
        query = query.where(col(Space.held) == where.held)
    if where.search:
        query = query.where(_name_contains(where.search))
    if where.scalable is True:
        query = query.where(sa.not_(col(Space.synthetic)), status == "ACTIVE")
    elif where.scalable is False:
        query = query.where(sa.or_(col(Space.synthetic), status != "ACTIVE"))
    return query


# Never-probed spaces sort as if probed at the epoch: first ascending, last descending,
# the same on SQLite and Postgres (which disagree on where NULLs go).
NEVER = datetime(1970, 1, 1, tzinfo=UTC)


def order_key(field: str, stale_before: datetime) -> Any:
    """The sort key of SpaceOrderField `field`; ties are broken by id."""
    if field == "NAME":
        return col(Space.name)
    if field == "STATUS":
        return effective_status(stale_before)
    if field == "CREATED_AT":
        return col(Space.created_at)
    if field == "LAST_PROBE_AT":
        return sa.func.coalesce(col(Space.last_probe_at), sa.literal(NEVER, UtcDateTime()))
    raise ValueError(f"no space order {field!r}")


async def list_spaces(
    session: AsyncSession,
    org_id: str,
    where: SpaceWhere,
    keyset: Keyset,
    *,
    stale_before: datetime,
    order_by: str | None = None,
    descending: bool = False,
    with_accounts: bool = False,
) -> Page[SpaceRecord]:
    """A page of the org's spaces: by id, or by `order_by` then id; with `with_accounts`,
    each with its cloud account (the org's own) in the same statement."""
    table = Space.__table__.c  # type: ignore[attr-defined]
    query = _spaces_where(org_id, where, stale_before).with_only_columns(
        *(table[name] for name in _SPACE_COLUMNS)
    )
    record = _space_record
    if with_accounts:
        accounts = CloudAccount.__table__.c  # type: ignore[attr-defined]
        query = query.outerjoin(
            CloudAccount.__table__,  # type: ignore[attr-defined]
            sa.and_(accounts.id == table.cloud_account_id, accounts.org_id == table.org_id),
        ).add_columns(*(accounts[name] for name in _ACCOUNT_COLUMNS))
        record = _space_with_account
    key = None if order_by is None else order_key(order_by, stale_before)
    return await ordered_page(session, query, col(Space.id), Order(key, descending), keyset, record)


async def count_spaces(
    session: AsyncSession, org_id: str, where: SpaceWhere, *, stale_before: datetime
) -> dict[str, int]:
    """total, active, inactive, unknown and held, in one statement."""
    status = effective_status(stale_before)

    def how_many(condition: sa.ColumnElement[bool]) -> sa.ColumnElement[int]:
        return sa.func.coalesce(sa.func.sum(sa.case((condition, 1), else_=0)), 0)

    counts = _spaces_where(org_id, where, stale_before).with_only_columns(
        sa.func.count(),
        how_many(status == "ACTIVE"),
        how_many(status == "INACTIVE"),
        how_many(status == "UNKNOWN"),
        how_many(col(Space.held).is_(True)),
    )
    row = (await session.execute(counts)).one()
    return dict(zip(("total", "active", "inactive", "unknown", "held"), row, strict=True))


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


async def events_page(
    session: AsyncSession,
    org_id: str,
    first: int,
    after: int | None,
    space_ids: Sequence[str] | None,
) -> Page[SpaceStatusEvent]:
    """An org's events in the order they happened (ids are assigned in that order)."""
    query = sa.select(SpaceStatusEvent).where(col(SpaceStatusEvent.org_id) == org_id)
    if space_ids is not None:
        query = query.where(col(SpaceStatusEvent.space_id).in_(space_ids))
    found = await ordered_page(
        session,
        query,
        col(SpaceStatusEvent.id),
        Order(),
        Keyset(first, False, None if after is None else (None, after)),
    )
    return found


class StatusEventRecord(NamedTuple):
    """A status event as a list read shows it: its columns in a tuple, no ORM object
    (issue 12)."""

    id: int
    space_id: str
    previous: str | None
    status: str
    reason: str | None
    reason_code: str | None
    at: datetime


async def recent_events(
    session: AsyncSession, space_ids: Sequence[str], first: int
) -> dict[str, list[StatusEventRecord]]:
    """The newest `first` events of each space, in one query."""
    table = SpaceStatusEvent.__table__.c  # type: ignore[attr-defined]
    rank = (
        sa.func.row_number()
        .over(partition_by=table.space_id, order_by=sa.desc(table.id))
        .label("rank")
    )
    ranked = (
        sa.select(*(table[name] for name in StatusEventRecord._fields), rank)
        .where(table.space_id.in_(space_ids))
        .subquery()
    )
    query = (
        sa.select(*(ranked.c[name] for name in StatusEventRecord._fields))
        .where(ranked.c.rank <= first)
        .order_by(sa.desc(ranked.c.id))
    )
    grouped: dict[str, list[StatusEventRecord]] = defaultdict(list)
    for row in await session.execute(query):
        event = StatusEventRecord._make(row)
        grouped[event.space_id].append(event)
    return grouped
