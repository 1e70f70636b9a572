"""The App Advisor's SQL: its schedule (enrolment, claims with leases, as the reconciler's),
the findings a run merges in, exemptions, dismissals, and the batches of changes that
adviceChanged streams.

A run's merge is a handful of statements whatever the number of findings: the known
fingerprints in one read, new findings in one multi-row insert, changed ones in one
executemany, the gone ones resolved in one update, every open one's last-seen time in
another, and the run's changes in one batch row.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from db.advisor_tables import AdviceEvent, AdvisorExemption, AdvisorFinding, AdvisorSchedule
from db.app_tables import App, AppEvent
from db.claims import WorkQueue
from db.cloudspace_tables import CloudSpace, CloudSpaceEvent

READY = "READY"
_ready = sa.exists().where(
    col(CloudSpace.id) == col(AdvisorSchedule.cloud_space_id), col(CloudSpace.phase) == READY
)
# READY CloudSpaces' schedules: due when next_run_at has come, leased while a run reads.
RUN_QUEUE = WorkQueue(
    model=AdvisorSchedule,
    id=col(AdvisorSchedule.cloud_space_id),
    due=col(AdvisorSchedule.next_run_at),
    live=_ready,
    claimed_by=col(AdvisorSchedule.claimed_by),
    lease_until=col(AdvisorSchedule.lease_until),
)
# What the explainer works through: findings due for a model's explanation, still open.
EXPLAIN_QUEUE = WorkQueue(
    model=AdvisorFinding,
    id=col(AdvisorFinding.id),
    due=col(AdvisorFinding.explain_due_at),
    live=sa.and_(
        col(AdvisorFinding.resolved_at).is_(None), col(AdvisorFinding.dismissed_at).is_(None)
    ),
)
FINDINGS = AdvisorFinding.__table__  # type: ignore[attr-defined]


def _insert(session: AsyncSession, table: Any) -> Any:
    dialect = sqlite if session.get_bind().dialect.name == "sqlite" else postgresql
    return dialect.insert(table)


# -- the schedule ---------------------------------------------------------------------
async def enroll_ready(session: AsyncSession, now: datetime) -> None:
    """A schedule, due now, for every READY CloudSpace that has none (replicas racing
    to enrol one both succeed: the second insert does nothing)."""
    at = sa.literal(now, AdvisorSchedule.next_run_at.type)  # type: ignore[attr-defined]
    missing = sa.select(col(CloudSpace.id), col(CloudSpace.org_id), at, at).where(
        col(CloudSpace.phase) == READY,
        ~sa.exists().where(col(AdvisorSchedule.cloud_space_id) == col(CloudSpace.id)),
    )
    statement = _insert(session, AdvisorSchedule.__table__).from_select(  # type: ignore[attr-defined]
        ["cloud_space_id", "org_id", "next_run_at", "enabled_at"], missing
    )
    await session.execute(
        statement.on_conflict_do_nothing(),
        execution_options={"synchronize_session": False},
    )


async def earliest_due(session: AsyncSession) -> datetime | None:
    found: datetime | None = await session.scalar(
        sa.select(sa.func.min(col(AdvisorSchedule.next_run_at))).where(_ready)
    )
    return found


async def run_soon(session: AsyncSession, cloud_space_id: str, now: datetime) -> None:
    """The CloudSpace changed (READY again, an app changed): its next run is due now."""
    await session.execute(
        sa.update(AdvisorSchedule)
        .where(col(AdvisorSchedule.cloud_space_id) == cloud_space_id)
        .values(next_run_at=now)
    )


@dataclass
class Seen:
    """The newest app and CloudSpace event ids a process has looked at."""

    app_event: int = 0
    cloud_space_event: int = 0


async def newest_events(session: AsyncSession) -> Seen:
    app = await session.scalar(sa.select(sa.func.max(col(AppEvent.id))))
    cloud_space = await session.scalar(sa.select(sa.func.max(col(CloudSpaceEvent.id))))
    return Seen(int(app or 0), int(cloud_space or 0))


async def run_changed_soon(session: AsyncSession, seen: Seen, now: datetime) -> None:
    """CloudSpaces with an app event, or that became READY, since `seen` (which moves on)
    are due now. One statement when nothing changed: a range of two primary keys."""
    apps = (
        sa.select(sa.literal("app"), col(AppEvent.cloud_space_id), sa.func.max(col(AppEvent.id)))
        .where(col(AppEvent.id) > seen.app_event, col(AppEvent.cloud_space_id).is_not(None))
        .group_by(col(AppEvent.cloud_space_id))
    )
    ready = (
        sa.select(
            sa.literal("cloud_space"),
            col(CloudSpaceEvent.cloud_space_id),
            sa.func.max(col(CloudSpaceEvent.id)),
        )
        .where(
            col(CloudSpaceEvent.id) > seen.cloud_space_event, col(CloudSpaceEvent.phase) == READY
        )
        .group_by(col(CloudSpaceEvent.cloud_space_id))
    )
    changed: list[Any] = list((await session.execute(sa.union_all(apps, ready))).all())
    if not changed:
        return
    for source, _, newest in changed:
        if source == "app":
            seen.app_event = max(seen.app_event, int(newest))
        else:
            seen.cloud_space_event = max(seen.cloud_space_event, int(newest))
    await session.execute(
        sa.update(AdvisorSchedule)
        .where(
            col(AdvisorSchedule.cloud_space_id).in_({cloud_space for _, cloud_space, _ in changed}),
            col(AdvisorSchedule.next_run_at) > now,
        )
        .values(next_run_at=now)
    )


async def locked_if_claimed(
    session: AsyncSession, cloud_space_id: str, owner: str
) -> AdvisorSchedule | None:
    query = sa.select(AdvisorSchedule).where(col(AdvisorSchedule.cloud_space_id) == cloud_space_id)
    if session.get_bind().dialect.name != "sqlite":
        query = query.with_for_update()
    row = (await session.scalars(query.execution_options(populate_existing=True))).first()
    return row if row is not None and row.claimed_by == owner else None


async def lock_schedule(session: AsyncSession, cloud_space_id: str) -> None:
    """Waits for a run merging into the CloudSpace (it holds its schedule row) and keeps the
    next one waiting until commit, so an exemption and a run never cross."""
    if session.get_bind().dialect.name == "sqlite":
        return  # one writer at a time already
    await session.execute(
        sa.select(col(AdvisorSchedule.cloud_space_id))
        .where(col(AdvisorSchedule.cloud_space_id) == cloud_space_id)
        .with_for_update()
    )


async def release_all(session: AsyncSession, owner: str, now: datetime) -> None:
    await session.execute(
        sa.update(AdvisorSchedule)
        .where(col(AdvisorSchedule.claimed_by) == owner)
        .values(claimed_by=None, lease_until=None, next_run_at=now)
    )


async def schedules(
    session: AsyncSession, cloud_space_ids: Sequence[str]
) -> Sequence[AdvisorSchedule]:
    query = sa.select(AdvisorSchedule).where(
        col(AdvisorSchedule.cloud_space_id).in_(cloud_space_ids)
    )
    return (await session.scalars(query)).all()


# -- a run's merge ----------------------------------------------------------------------
@dataclass(frozen=True)
class Known:
    """What the merge needs of a stored finding."""

    id: str
    fingerprint: str
    content_digest: str
    resolved: bool
    dismissed: bool


async def known(session: AsyncSession, cloud_space_id: str) -> dict[str, Known]:
    query = sa.select(
        col(AdvisorFinding.id),
        col(AdvisorFinding.fingerprint),
        col(AdvisorFinding.content_digest),
        col(AdvisorFinding.resolved_at).is_not(None),
        col(AdvisorFinding.dismissed_at).is_not(None),
    ).where(col(AdvisorFinding.cloud_space_id) == cloud_space_id)
    return {row[1]: Known(*row) for row in (await session.execute(query)).all()}


async def insert_findings(session: AsyncSession, rows: Sequence[dict[str, Any]]) -> None:
    if rows:
        await session.execute(sa.insert(FINDINGS), list(rows))


async def update_findings(session: AsyncSession, rows: Sequence[dict[str, Any]]) -> None:
    """Each row: `finding_id` and the columns to set (one executemany for all of them)."""
    if not rows:
        return
    columns = {key for key in rows[0] if key != "finding_id"}
    statement = (
        sa.update(FINDINGS)
        .where(FINDINGS.c.id == sa.bindparam("finding_id"))
        .values({key: sa.bindparam(f"v_{key}") for key in columns})
    )
    await session.execute(
        statement,
        [{"finding_id": r["finding_id"], **{f"v_{k}": r[k] for k in columns}} for r in rows],
        execution_options={"synchronize_session": False},
    )


async def resolve(session: AsyncSession, ids: Sequence[str], now: datetime) -> None:
    if ids:
        await session.execute(
            sa.update(AdvisorFinding)
            .where(col(AdvisorFinding.id).in_(ids))
            .values(resolved_at=now, changed_at=now, explain_due_at=None)
        )


async def seen(session: AsyncSession, cloud_space_id: str, now: datetime) -> None:
    """Every open finding of the CloudSpace was seen by this run."""
    await session.execute(
        sa.update(AdvisorFinding)
        .where(
            col(AdvisorFinding.cloud_space_id) == cloud_space_id,
            col(AdvisorFinding.resolved_at).is_(None),
        )
        .values(last_seen_at=now)
    )


async def forget_resolved(session: AsyncSession, cloud_space_id: str, before: datetime) -> None:
    """Resolved findings (not dismissed ones) are kept until `before`."""
    await session.execute(
        sa.delete(AdvisorFinding).where(
            col(AdvisorFinding.cloud_space_id) == cloud_space_id,
            col(AdvisorFinding.resolved_at) < before,
            col(AdvisorFinding.dismissed_at).is_(None),
        )
    )


async def add_changes(
    session: AsyncSession,
    org_id: str,
    cloud_space_id: str,
    changes: Sequence[tuple[str, str]],
    now: datetime,
) -> int | None:
    """One batch of (finding id, change); its id, or None when there is nothing to say."""
    if not changes:
        return None
    event = AdviceEvent(
        org_id=org_id,
        cloud_space_id=cloud_space_id,
        changes_json=json.dumps([list(c) for c in changes], separators=(",", ":")),
        at=now,
    )
    session.add(event)
    await session.flush()
    return event.id


async def forget_changes(session: AsyncSession, before: datetime) -> None:
    await session.execute(sa.delete(AdviceEvent).where(col(AdviceEvent.at) < before))


# -- one finding, exemptions ----------------------------------------------------------
async def finding_for_update(
    session: AsyncSession, org_id: str, finding_id: str
) -> AdvisorFinding | None:
    query = sa.select(AdvisorFinding).where(
        col(AdvisorFinding.id) == finding_id, col(AdvisorFinding.org_id) == org_id
    )
    if session.get_bind().dialect.name != "sqlite":
        query = query.with_for_update()
    return (await session.scalars(query)).first()


async def app_ids(session: AsyncSession, cloud_space: CloudSpace) -> frozenset[str]:
    """The ids of the CloudSpace's apps (its org's, delivered into it)."""
    query = sa.select(col(App.id)).where(
        col(App.cloud_space_id) == cloud_space.id, col(App.org_id) == cloud_space.org_id
    )
    return frozenset((await session.scalars(query)).all())


async def exempt_rules(session: AsyncSession, cloud_space_id: str) -> frozenset[str]:
    query = sa.select(col(AdvisorExemption.rule_id)).where(
        col(AdvisorExemption.cloud_space_id) == cloud_space_id
    )
    return frozenset((await session.scalars(query)).all())


async def exemption(
    session: AsyncSession, cloud_space_id: str, rule_id: str
) -> AdvisorExemption | None:
    return await session.get(AdvisorExemption, (cloud_space_id, rule_id))


async def open_of_rule(session: AsyncSession, cloud_space_id: str, rule_id: str) -> Sequence[str]:
    query = sa.select(col(AdvisorFinding.id)).where(
        col(AdvisorFinding.cloud_space_id) == cloud_space_id,
        col(AdvisorFinding.rule_id) == rule_id,
        col(AdvisorFinding.resolved_at).is_(None),
    )
    return (await session.scalars(query)).all()


# -- explanations ---------------------------------------------------------------------
async def explained(
    session: AsyncSession, finding_id: str, explanation: str, now: datetime
) -> bool:
    """Stores a finding's explanation, unless it has one already (a second replica's)."""
    result = await session.execute(
        sa.update(AdvisorFinding)
        .where(col(AdvisorFinding.id) == finding_id, col(AdvisorFinding.explanation).is_(None))
        .values(explanation=explanation, explained_at=now, explain_due_at=None)
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


async def explain_later(
    session: AsyncSession, finding_id: str, attempts: int, due: datetime | None
) -> None:
    await session.execute(
        sa.update(AdvisorFinding)
        .where(col(AdvisorFinding.id) == finding_id)
        .values(explain_attempts=attempts, explain_due_at=due)
    )
