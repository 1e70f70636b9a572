"""An app's history as subscribers see it: every status change and every revision state
change is an AppEvent, persisted and published after commit on APP_CHANGED (with ids only,
as every bus payload), so appChanged streams it and a replica that missed the NOTIFY
replays it (core.common.event_replay)."""

from __future__ import annotations

from enum import StrEnum

from core.common.events import APP_CHANGED
from core.common.metrics import observe_app_revision
from core.common.services import Unit
from db import apps as app_rows
from db.app_tables import App, AppEvent, AppRevision


class EventKind(StrEnum):
    STATUS = "STATUS"
    REVISION = "REVISION"
    DELETED = "DELETED"


class RevisionState(StrEnum):
    QUEUED = "QUEUED"
    APPLYING = "APPLYING"
    APPLIED = "APPLIED"
    READY = "READY"
    FAILED = "FAILED"
    DEAD_LETTERED = "DEAD_LETTERED"
    SUPERSEDED = "SUPERSEDED"


# Revisions the delivery worker still has to bring to the cluster, oldest first.
PENDING = (RevisionState.QUEUED, RevisionState.APPLYING)
# Revisions whose fate Flux decides (the status loop reads it).
AWAITING_FLUX = (RevisionState.APPLIED,)
# Where a revision's life ends: its duration from creation goes to /metrics then.
SETTLED = (
    RevisionState.READY,
    RevisionState.FAILED,
    RevisionState.DEAD_LETTERED,
    RevisionState.SUPERSEDED,
)


async def record(
    unit: Unit,
    app: App,
    kind: EventKind,
    *,
    previous_status: str | None = None,
    revision: AppRevision | None = None,
) -> None:
    """Persists one event about `app` (and `revision`) as they are now, and publishes it."""
    event = await app_rows.add_event(
        unit.session,
        AppEvent(
            app_id=app.id,
            org_id=app.org_id,
            cloud_space_id=app.cloud_space_id,
            environment_id=app.environment_id,
            kind=kind,
            previous_status=previous_status,
            status=app.status,
            reason=revision.reason if revision is not None else app.status_reason,
            message=None if revision is not None else app.status_message,
            revision_id=None if revision is None else revision.id,
            revision_number=None if revision is None else revision.number,
            revision_state=None if revision is None else revision.state,
            at=unit.now,
        ),
    )
    unit.publish(
        APP_CHANGED,
        {
            "event_id": event.id,
            "app_id": app.id,
            "org_id": app.org_id,
            "cloud_space_id": app.cloud_space_id,
            "environment_id": app.environment_id,
        },
    )


async def revision_moved(unit: Unit, app: App, revision: AppRevision, state: str) -> None:
    """Moves a revision to `state` and records it (nothing when it is there already)."""
    if revision.state == state:
        return
    revision.state = state
    unit.session.add(revision)
    await unit.session.flush()
    if state in SETTLED:
        observe_app_revision((unit.now - revision.created_at).total_seconds(), state)
    await record(unit, app, EventKind.REVISION, revision=revision)
