"""The revision queue's rules, as the delivery worker writes them on a locked app: a try
spent against an unavailable target, dead-lettering, the end of a delivery, and the end of
an app. Each runs inside the worker's transaction and records its events."""

from __future__ import annotations

from datetime import timedelta

from core.apps.history import EventKind, RevisionState, record, revision_moved
from core.apps.settings import MAX_TRIES
from core.apps.writes import Written
from core.common.services import Unit
from db import apps as app_rows
from db.app_tables import App, AppRevision


def reschedule(unit: Unit, app: App, seconds: float | None) -> None:
    """Ends the worker's lease; the app is due again in `seconds` (None: when asked)."""
    app.claimed_by = app.lease_until = None
    app.delivery_due_at = None if seconds is None else unit.now + timedelta(seconds=seconds)
    unit.session.add(app)


async def pending(unit: Unit, app: App) -> list[AppRevision]:
    return list(
        await app_rows.in_states(
            unit.session, [app.id], [RevisionState.QUEUED, RevisionState.APPLYING]
        )
    )


async def spend_try(unit: Unit, app: App, why: str) -> bool:
    """Every pending revision was tried against an unavailable target: one try each, and
    those that have had MAX_TRIES are dead-lettered with the reason. Whether any still waits."""
    waiting = False
    for revision in await pending(unit, app):
        revision.tries += 1
        if revision.tries >= MAX_TRIES:
            revision.reason = f"not delivered after {MAX_TRIES} tries: {why}"
            revision.finished_at = unit.now
            await revision_moved(unit, app, revision, RevisionState.DEAD_LETTERED)
            continue
        waiting = True
        revision.reason = f"try {revision.tries} of {MAX_TRIES} failed: {why}"
        if revision.state == RevisionState.QUEUED:  # a new try is an event of its own
            unit.session.add(revision)
            await unit.session.flush()
            await record(unit, app, EventKind.REVISION, revision=revision)
        else:
            await revision_moved(unit, app, revision, RevisionState.QUEUED)
    return waiting


async def dead_letter_all(unit: Unit, app: App, why: str) -> None:
    """The target is gone (seed 001: pending revisions move to the DLQ on the next claim)."""
    for revision in await pending(unit, app):
        revision.reason, revision.finished_at = why, unit.now
        await revision_moved(unit, app, revision, RevisionState.DEAD_LETTERED)


async def waits(unit: Unit, app: App, revision: AppRevision, why: str) -> None:
    """The target is coming up: the revision waits, no try spent; a new reason is an event."""
    if revision.reason == why:
        return
    revision.reason = why
    unit.session.add(revision)
    await unit.session.flush()
    await record(unit, app, EventKind.REVISION, revision=revision)


async def delivered(
    unit: Unit, app: App, revision: AppRevision, written: Written, suspended: bool
) -> None:
    """The revision's objects are on the cluster: APPLIED, and any earlier revision still
    waiting for Flux's answer is SUPERSEDED by it. The status loop reads the app next."""
    revision.source_generation = written.source_generation
    revision.deploy_generation = written.deploy_generation
    revision.applied_at, revision.reason = unit.now, None
    await revision_moved(unit, app, revision, RevisionState.APPLIED)
    for earlier in await app_rows.in_states(unit.session, [app.id], [RevisionState.APPLIED]):
        if earlier.number < revision.number:
            earlier.finished_at = unit.now
            await revision_moved(unit, app, earlier, RevisionState.SUPERSEDED)
    app.delivered_revision = revision.number
    app.delivered_suspended = suspended
    app.status_due_at = unit.now
    unit.session.add(app)


async def failed(unit: Unit, app: App, revision: AppRevision, why: str) -> None:
    revision.reason, revision.finished_at = why, unit.now
    await revision_moved(unit, app, revision, RevisionState.FAILED)


async def removed(unit: Unit, app: App) -> None:
    """The last of deleteApp: DELETED is recorded, then the app and its revisions go."""
    await record(unit, app, EventKind.DELETED, previous_status=app.status)
    unit.session.expunge(app)
    await app_rows.delete(unit.session, app.id)


async def say(unit: Unit, app: App, message: str) -> None:
    """A DELETING app's message (what blocks it); a change is an event."""
    if app.status_message == message:
        return
    app.status_message = message
    unit.session.add(app)
    await unit.session.flush()
    await record(unit, app, EventKind.STATUS, previous_status=app.status)
