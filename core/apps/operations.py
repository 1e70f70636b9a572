"""What is done to an app without a new revision: suspend and resume it (Flux's
`spec.suspend`), ask Flux to reconcile it now (`reconcile.fluxcd.io/requestedAt`), delete
it, and put a dead-lettered revision back in the queue. Each records the wish on the app
row in the mutation's transaction; the delivery worker writes it to the cluster."""

from __future__ import annotations

from core.apps.history import EventKind, RevisionState, record, revision_moved
from core.apps.lifecycle import DELETE, DEPLOY, Delivered, in_org, still_here
from core.apps.status import AppStatus
from core.apps.targets import TargetState, read_world, target_of_app
from core.common.errors import UserErrors
from core.common.rbac import Viewer
from core.common.services import Services, Unit
from db import apps as app_rows
from db.app_tables import App

DELETING_MESSAGE = "removing its Flux objects (Flux prunes what they applied)"


def _wanted(unit: Unit, app: App) -> None:
    app.delivery_due_at = unit.now
    unit.session.add(app)
    unit.deliver_soon = True


async def set_suspended(unit: Unit, viewer: Viewer, app_id: str, suspended: bool) -> Delivered:
    """suspendApp / resumeApp; asking for the state it is in already changes nothing."""
    viewer.require(DEPLOY)
    app = await in_org(unit, viewer, app_id)
    still_here(app)
    if app.suspended != suspended:
        app.suspended = suspended
        _wanted(unit, app)
    return Delivered(app, None)


async def sync(unit: Unit, viewer: Viewer, app_id: str) -> Delivered:
    """syncApp: Flux reconciles the source and the app now rather than at its interval."""
    viewer.require(DEPLOY)
    app = await in_org(unit, viewer, app_id)
    still_here(app)
    if app.suspended:
        raise UserErrors.one(
            ["input", "id"],
            "the app is suspended and Flux ignores it; resumeApp first",
            "PRECONDITION_FAILED",
        )
    if app.delivered_revision is None:
        raise UserErrors.one(
            ["input", "id"],
            "the app has no revision on its target yet; its first one is still queued",
            "PRECONDITION_FAILED",
        )
    app.sync_requested_at = unit.now
    _wanted(unit, app)
    return Delivered(app, None)


async def delete(unit: Unit, viewer: Viewer, app_id: str, confirm_name: str) -> Delivered:
    """deleteApp: DELETING at once; the worker prunes what the app deployed, then removes
    its Flux objects and the app. Revisions still queued are dead-lettered."""
    viewer.require(DELETE)
    app = await in_org(unit, viewer, app_id)
    if confirm_name != app.name:
        raise UserErrors.one(["input", "confirmName"], "confirmName must equal the app's name")
    if app.deleting:
        return Delivered(app, None)
    previous = app.status
    app.deleting = True
    app.status, app.status_reason, app.status_message = (
        AppStatus.DELETING,
        "Deleting",
        DELETING_MESSAGE,
    )
    _wanted(unit, app)
    await unit.session.flush()
    await record(unit, app, EventKind.STATUS, previous_status=previous)
    for queued in await app_rows.in_states(unit.session, [app.id], [RevisionState.QUEUED]):
        queued.reason = "the app is being deleted"
        await revision_moved(unit, app, queued, RevisionState.DEAD_LETTERED)
    return Delivered(app, None)


async def requeue(unit: Unit, services: Services, viewer: Viewer, revision_id: str) -> Delivered:
    """requeueAppRevision: a DEAD_LETTERED revision is QUEUED again with fresh tries, once
    its target can take it and no later revision has been applied."""
    viewer.require(DEPLOY)
    revision = await app_rows.revision(unit.session, viewer.org_id, revision_id)
    if revision is None:
        raise UserErrors.one(["input", "id"], "no such revision", "NOT_FOUND")
    app = await in_org(unit, viewer, revision.app_id)
    still_here(app)

    def refused(message: str) -> UserErrors:
        return UserErrors.one(["input", "id"], message, "PRECONDITION_FAILED")

    if revision.state != RevisionState.DEAD_LETTERED:
        raise refused(
            f"revision {revision.number} is {revision.state}; only DEAD_LETTERED revisions are "
            "requeued (rollbackApp makes a new revision of an earlier source)"
        )
    if app.delivered_revision is not None and app.delivered_revision > revision.number:
        raise refused(
            f"revision {app.delivered_revision} is newer and was applied; rollbackApp to "
            f"revision {revision.number} to go back to it"
        )
    target = target_of_app(services, app, await read_world(unit.session, [app]), unit.now)
    if target.state in (TargetState.GONE, TargetState.UNAVAILABLE):
        raise refused(f"the target cannot take it: {target.why}; requeue once it recovers")
    revision.tries, revision.reason, revision.finished_at = 0, None, None
    await revision_moved(unit, app, revision, RevisionState.QUEUED)
    _wanted(unit, app)
    return Delivered(app, revision)
