"""Spaces, their status history, and the queries the probe loop and pickers need."""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from db.pages import (
    Keyset,
    Order,
    Page,
    PageStatements,
    ReadsFrom,
    ordered_page,
    read_page,
    substring_pattern,
)
from db.records import (
    ACCOUNT_READ,
    SPACE_READ,
    STATUS_EVENT_READ,
    CloudAccountRecord,
    SpaceRecord,
    SpaceWhere,
    StatusEventRecord,
)
from db.tables import CloudAccount, Space, SpaceStatusEvent, UtcDateTime

EVENTS_KEPT_PER_SPACE = 1000
LIVE = col(Space.deregistered_at).is_(None)


# When a space's last probe counts as stale: the health rule's limit for this read, bound.
STALE_BEFORE = sa.bindparam("stale_before", type_=UtcDateTime())
# The health rule in SQL; `core.spaces.health.HealthRule.status_of` is the same rule in Python.
EFFECTIVE_STATUS: sa.ColumnElement[str] = sa.case(
    # A deregistered space reads INACTIVE ("deregistered") from then on.
    (sa.not_(LIVE), "INACTIVE"),
    (col(Space.held), "INACTIVE"),
    (sa.func.coalesce(Space.last_probe_at, Space.created_at) < STALE_BEFORE, "UNKNOWN"),
    else_=Space.probe_status,
)


async def live_space_where(session: AsyncSession, org_id: str, **equal: str) -> Space | None:
    query = sa.select(Space).where(col(Space.org_id) == org_id, LIVE)
    for column, value in equal.items():
        query = query.where(getattr(Space, column) == value)
    return (await session.scalars(query)).first()


_SPACE_COLUMNS = SPACE_READ.columns
_ACCOUNT_COLUMNS = ACCOUNT_READ.columns


def _space_record(row: Sequence[Any]) -> SpaceRecord:
    return SpaceRecord(*row[: len(_SPACE_COLUMNS)])


def _space_with_account(row: Sequence[Any]) -> SpaceRecord:
    start, end = len(_SPACE_COLUMNS), len(_SPACE_COLUMNS) + len(_ACCOUNT_COLUMNS)
    account = None if row[start] is None else CloudAccountRecord._make(row[start:end])
    return SpaceRecord._make([*row[:start], account])


class _WhereShape(NamedTuple):
    """Which conditions of a SpaceWhere are given: what shapes the statement (their values
    are bound parameters, `_where_parameters`)."""

    statuses: bool
    provider: bool
    providers: bool
    cloud_account_ids: bool
    held: bool
    search: bool
    scalable: bool | None
    live_only: bool

    @classmethod
    def of(cls, where: SpaceWhere) -> _WhereShape:
        return cls(
            where.statuses is not None,
            where.provider is not None,
            where.providers is not None,
            where.cloud_account_ids is not None,
            where.held is not None,
            bool(where.search),
            where.scalable,
            not where.include_deregistered or bool(where.scalable),
        )


def _where_parameters(org_id: str, where: SpaceWhere, stale_before: datetime) -> dict[str, Any]:
    return {
        "org_id": org_id,
        "stale_before": stale_before,
        "statuses": where.statuses,
        "provider": where.provider,
        "providers": where.providers,
        "cloud_account_ids": where.cloud_account_ids,
        "held": where.held,
        # On Postgres the trigram index on name serves it.
        "search": substring_pattern(where.search) if where.search else None,
    }


def _spaces_where(shape: _WhereShape) -> sa.Select[Any]:
    query = sa.select(Space).where(col(Space.org_id) == sa.bindparam("org_id"))
    if shape.live_only:
        query = query.where(LIVE)
    if shape.statuses:
        query = query.where(EFFECTIVE_STATUS.in_(sa.bindparam("statuses", expanding=True)))
    if shape.provider:
        query = query.where(col(Space.provider) == sa.bindparam("provider"))
    if shape.providers:
        query = query.where(col(Space.provider).in_(sa.bindparam("providers", expanding=True)))
    if shape.cloud_account_ids:
        account_ids: sa.BindParameter[list[str]] = sa.bindparam("cloud_account_ids", expanding=True)
        query = query.where(col(Space.cloud_account_id).in_(account_ids))
    if shape.held:
        query = query.where(col(Space.held) == sa.bindparam("held"))
    if shape.search:
        query = query.where(col(Space.name).ilike(sa.bindparam("search"), escape="\\"))
    if shape.scalable is True:
        query = query.where(sa.not_(col(Space.synthetic)), EFFECTIVE_STATUS == "ACTIVE")
    elif shape.scalable is False:
        query = query.where(sa.or_(col(Space.synthetic), EFFECTIVE_STATUS != "ACTIVE"))
    return query


# Never-probed spaces sort as if probed at the epoch: first ascending, last descending,
# the same on SQLite and Postgres (which disagree on where NULLs go).
NEVER = datetime(1970, 1, 1, tzinfo=UTC)


# STATUS sorts by severity, not by the words: ascending, what needs a look comes first.
STATUS_SEVERITY = {"INACTIVE": 0, "UNKNOWN": 1, "ACTIVE": 2}


def order_key(field: str) -> Any:
    """The sort key of SpaceOrderField `field`; ties are broken by id."""
    if field == "NAME":
        return col(Space.name)
    if field == "STATUS":
        return sa.case(STATUS_SEVERITY, value=EFFECTIVE_STATUS, else_=len(STATUS_SEVERITY))
    if field == "CREATED_AT":
        return col(Space.created_at)
    if field == "LAST_PROBE_AT":
        return sa.func.coalesce(col(Space.last_probe_at), sa.literal(NEVER, UtcDateTime()))
    raise ValueError(f"no space order {field!r}")


# Statements are built once per shape and kept (bounded: shapes are few in practice):
# building one and working out its cache key cost more than running it (issue 12).
STATEMENTS_KEPT = 256


@functools.lru_cache(maxsize=STATEMENTS_KEPT)
def _page_statements(
    shape: _WhereShape,
    order_by: str | None,
    descending: bool,
    reads_from: ReadsFrom,
    with_accounts: bool,
) -> PageStatements:
    table = Space.__table__.c  # type: ignore[attr-defined]
    query = _spaces_where(shape).with_only_columns(*_SPACE_COLUMNS)
    if with_accounts:
        accounts = CloudAccount.__table__.c  # type: ignore[attr-defined]
        query = query.outerjoin(
            CloudAccount.__table__,  # type: ignore[attr-defined]
            sa.and_(accounts.id == table.cloud_account_id, accounts.org_id == table.org_id),
        ).add_columns(*_ACCOUNT_COLUMNS)
    key = None if order_by is None else order_key(order_by)
    return PageStatements.of(query, col(Space.id), Order(key, descending), reads_from)


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
    statements = _page_statements(
        _WhereShape.of(where), order_by, descending, keyset.reads_from, with_accounts
    )
    return await read_page(
        session,
        statements,
        _where_parameters(org_id, where, stale_before),
        keyset,
        _space_with_account if with_accounts else _space_record,
    )


@functools.lru_cache(maxsize=STATEMENTS_KEPT)
def _counts_statement(shape: _WhereShape) -> sa.Select[int, int, int, int, int]:
    def how_many(condition: sa.ColumnElement[bool]) -> sa.ColumnElement[int]:
        return sa.func.coalesce(sa.func.sum(sa.case((condition, 1), else_=0)), 0)

    return _spaces_where(shape).with_only_columns(
        sa.func.count(),
        how_many(EFFECTIVE_STATUS == "ACTIVE"),
        how_many(EFFECTIVE_STATUS == "INACTIVE"),
        how_many(EFFECTIVE_STATUS == "UNKNOWN"),
        how_many(col(Space.held).is_(True)),
    )


async def count_spaces(
    session: AsyncSession, org_id: str, where: SpaceWhere, *, stale_before: datetime
) -> dict[str, int]:
    """total, active, inactive, unknown and held, in one statement."""
    statement = _counts_statement(_WhereShape.of(where))
    row = (await session.execute(statement, _where_parameters(org_id, where, stale_before))).one()
    return dict(zip(("total", "active", "inactive", "unknown", "held"), row, strict=True))


async def add_event(session: AsyncSession, event: SpaceStatusEvent) -> SpaceStatusEvent:
    event.id = (await add_events(session, [event]))[0]
    return event


async def add_events(session: AsyncSession, events: Sequence[SpaceStatusEvent]) -> list[int]:
    """Inserts the events in one statement and keeps the newest EVENTS_KEPT_PER_SPACE of each
    of their spaces in one more; their ids, in the order given. A storm of transitions used
    to cost two round trips each inside the probe step's transaction, which held every
    event back from its subscribers until the last was written (issue 19)."""
    if not events:
        return []
    table = SpaceStatusEvent.__table__  # type: ignore[attr-defined]
    rows = [event.model_dump(exclude={"id"}) for event in events]
    inserted = sa.insert(table).returning(table.c.id, sort_by_parameter_order=True)
    ids = list((await session.scalars(inserted, rows)).all())
    # Each space's events newest first, numbered: one pass over the rows of these spaces
    # (a correlated cutoff per row would walk up to 1,000 index entries for each).
    ranked = (
        sa.select(
            table.c.id,
            sa.func.row_number()
            .over(partition_by=table.c.space_id, order_by=table.c.id.desc())
            .label("newer"),
        )
        .where(table.c.space_id.in_(sorted({event.space_id for event in events})))
        .subquery()
    )
    trimmed = sa.select(ranked.c.id).where(ranked.c.newer > EVENTS_KEPT_PER_SPACE)
    await session.execute(sa.delete(table).where(table.c.id.in_(trimmed)))
    return ids


async def events_by_ids(session: AsyncSession, ids: Sequence[int]) -> Sequence[SpaceStatusEvent]:
    query = sa.select(SpaceStatusEvent).where(col(SpaceStatusEvent.id).in_(ids))
    return (await session.scalars(query)).all()


async def events_page(
    session: AsyncSession,
    org_id: str,
    size: int,
    position: int | None,
    space_ids: Sequence[str] | None,
    backward: bool = False,
) -> Page[SpaceStatusEvent]:
    """A page of an org's events in the order they happened (ids are assigned in that
    order): `size` after the event number `position`, or `backward`, the newest `size`
    before it (the newest of all without a position)."""
    query = sa.select(SpaceStatusEvent).where(col(SpaceStatusEvent.org_id) == org_id)
    if space_ids is not None:
        query = query.where(col(SpaceStatusEvent.space_id).in_(space_ids))
    keyset = Keyset(size, backward, None if position is None else (None, position))
    return await ordered_page(session, query, col(SpaceStatusEvent.id), Order(), keyset)


def _recent_events_statement() -> sa.Select[Any]:
    table = SpaceStatusEvent.__table__.c  # type: ignore[attr-defined]
    rank = (
        sa.func.row_number()
        .over(partition_by=table.space_id, order_by=sa.desc(table.id))
        .label("rank")
    )
    ranked = (
        sa.select(*STATUS_EVENT_READ.columns, rank)
        .where(table.space_id.in_(sa.bindparam("space_ids", expanding=True)))
        .subquery()
    )
    return (
        sa.select(*(ranked.c[name] for name in STATUS_EVENT_READ.names))
        .where(ranked.c.rank <= sa.bindparam("first"))
        .order_by(sa.desc(ranked.c.id))
    )


_RECENT_EVENTS = _recent_events_statement()


async def recent_events(
    session: AsyncSession, space_ids: Sequence[str], first: int
) -> dict[str, list[StatusEventRecord]]:
    """The newest `first` events of each space, in one query."""
    grouped: dict[str, list[StatusEventRecord]] = defaultdict(list)
    rows = await session.execute(_RECENT_EVENTS, {"space_ids": list(space_ids), "first": first})
    for row in rows:
        event = StatusEventRecord._make(row)
        grouped[event.space_id].append(event)
    return grouped
