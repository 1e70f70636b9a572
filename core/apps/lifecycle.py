"""Apps and their revisions: createApp, updateApp and rollbackApp each make a revision,
numbered per app, that the delivery worker (core.apps.delivery) brings to the target in
order. Checks that need the database run in the mutation's transaction; whether an
environment's space runs Flux is asked of its cluster between two transactions
(`flux_check`), as createNamespace does, so no connection waits on a cluster.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.access.audit import sanitised
from core.apps import sources
from core.apps.history import EventKind, RevisionState, record
from core.apps.requests import (
    CreateRequest,
    Placement,
    SourceRequest,
    check_name,
    checked_source,
    placement,
)
from core.apps.sources import GitCredential, Source, SourceKind
from core.apps.status import AppStatus
from core.common.errors import Problems, UserErrors
from core.common.ids import new_id
from core.common.live_calls import LiveCallBudget
from core.common.rbac import Viewer
from core.common.services import Services, Unit, utcnow
from core.spaces.clusters import credentials_for
from core.spaces.statuses import SpaceStatus
from db import apps as app_rows
from db import owned
from db.app_tables import App, AppRevision
from providers import host as host_api
from providers.errors import ProviderError

VIEW = "app:view"
DEPLOY = "app:deploy"
DELETE = "app:delete"
# What Flux must serve on an environment's space for an app of either kind.
FLUX_GROUPS = (
    "source.toolkit.fluxcd.io/v1",
    "kustomize.toolkit.fluxcd.io/v1",
    "helm.toolkit.fluxcd.io/v2",
)


@dataclass(frozen=True)
class Delivered:
    """What a mutation answers: the app, and the revision it made or acted on."""

    app: App
    revision: AppRevision | None

    @property
    def id(self) -> str:  # the audit log's target id (resolvers.common.audit)
        return self.app.id


async def in_org(unit: Unit, viewer: Viewer, app_id: str, field: str = "id") -> App:
    app = await owned.by_id(unit.session, App, viewer.org_id, app_id)
    if app is None:
        raise UserErrors.one(["input", field], "no such app", "NOT_FOUND")
    return await app_rows.lock(unit.session, app.id) or app


async def creation_target(unit: Unit, viewer: Viewer, request: CreateRequest) -> Placement:
    """Every check of createApp that needs no cluster; where the app would go."""
    viewer.require(DEPLOY)
    problems = Problems("input")
    placed = await placement(unit, viewer, problems, request.target)
    await check_name(
        unit, viewer, problems, request.name, None if placed is None else placed.target_key
    )
    checked_source(problems, request.source)
    problems.raise_if_any()
    assert placed is not None
    return placed


async def flux_check(services: Services, placed: Placement, budget: LiveCallBudget) -> None:
    """An environment's ACTIVE space must serve Flux's kinds: PRECONDITION_FAILED saying so
    when it does not. A space that cannot be asked now is not refused: the revision waits
    for it like any other."""
    space = placed.space
    if space is None or services.health.status_of(space, utcnow())[0] != SpaceStatus.ACTIVE:
        return
    missing: list[str] = []
    try:
        async with budget.call():
            credentials = await credentials_for(services, space)
            async with host_api.connect(
                credentials,
                deny=services.deny_networks,
                timeout_s=services.live_field_timeout_s,
                max_body_bytes=services.cluster_max_body_bytes,
            ) as kube:
                for group_version in FLUX_GROUPS:
                    if await kube.get(f"/apis/{group_version}") is None:
                        missing.append(group_version)
    except ProviderError:
        return
    if missing:
        raise UserErrors.one(
            ["input", "target", "environmentId"],
            f"space {space.name} does not run Flux: it serves no {', '.join(missing)}; install "
            "Flux's source-, kustomize- and helm-controller there (flux install) first",
            "PRECONDITION_FAILED",
        )


async def create(
    unit: Unit, services: Services, viewer: Viewer, request: CreateRequest
) -> Delivered:
    placed = await creation_target(unit, viewer, request)
    source, credential = checked_source(Problems("input"), request.source)
    assert source is not None
    app = App(
        id=new_id("app"),
        org_id=viewer.org_id,
        name=request.name,
        target_key=placed.target_key,
        cloud_space_id=placed.cloud_space_id,
        vcluster=placed.vcluster,
        environment_id=placed.environment_id,
        namespace=placed.namespace,
        source_kind=source.kind,
        credential_ciphertext=_sealed(services, credential),
        suspended=request.suspended,
        status=AppStatus.PROGRESSING,
        status_reason="Queued",
        status_message="its first revision waits to be delivered",
        status_due_at=unit.now,
        created_at=unit.now,
    )
    await owned.add(unit.session, app)
    await record(unit, app, EventKind.STATUS)
    revision = await new_revision(unit, viewer, app, source)
    return Delivered(app, revision)


def _sealed(services: Services, credential: GitCredential | None) -> str | None:
    return None if credential is None else services.secrets.seal(dict(credential.data))


async def new_revision(
    unit: Unit, viewer: Viewer, app: App, source: Source, rollback_of: int | None = None
) -> AppRevision:
    """The app's next revision, QUEUED; the delivery worker takes it in order."""
    app.revision_count += 1
    revision = AppRevision(
        id=new_id("apprev"),
        app_id=app.id,
        org_id=app.org_id,
        number=app.revision_count,
        source_json=sources.to_json(source),
        rollback_of=rollback_of,
        created_by=sanitised(viewer.subject),
        created_at=unit.now,
        state=RevisionState.QUEUED,
    )
    app.delivery_due_at = unit.now
    unit.session.add(app)
    await app_rows.add_revision(unit.session, revision)
    await record(unit, app, EventKind.REVISION, revision=revision)
    unit.deliver_soon = True
    return revision


def still_here(app: App, field: str = "id") -> None:
    if app.deleting:
        raise UserErrors.one(["input", field], "the app is being deleted", "PRECONDITION_FAILED")


async def update(
    unit: Unit, services: Services, viewer: Viewer, app_id: str, request: SourceRequest
) -> Delivered:
    """A new revision with the source asked for; the same source and credential again
    make none (the latest revision is answered)."""
    viewer.require(DEPLOY)
    app = await in_org(unit, viewer, app_id)
    still_here(app)
    problems = Problems("input")
    source, credential = checked_source(problems, request, SourceKind(app.source_kind))
    if request.remove_credential and request.credential is not None:
        problems.add(["removeCredential"], "give a credential or removeCredential, not both")
    problems.raise_if_any()
    assert source is not None
    sealed = app.credential_ciphertext
    if credential is not None:
        sealed = _sealed(services, credential)
    elif request.remove_credential:
        sealed = None
    (latest,) = await app_rows.latest_revisions(unit.session, [app.id])
    credential_changed = credential is not None or sealed != app.credential_ciphertext
    if sources.to_json(source) == latest.source_json and not credential_changed:
        return Delivered(app, latest)
    app.credential_ciphertext = sealed
    return Delivered(app, await new_revision(unit, viewer, app, source))


async def rollback(unit: Unit, viewer: Viewer, revision_id: str) -> Delivered:
    """A new revision asking for an earlier one's source (with the app's credential now)."""
    viewer.require(DEPLOY)
    earlier = await app_rows.revision(unit.session, viewer.org_id, revision_id)
    if earlier is None:
        raise UserErrors.one(["input", "revisionId"], "no such revision", "NOT_FOUND")
    app = await in_org(unit, viewer, earlier.app_id, "revisionId")
    still_here(app, "revisionId")
    source = sources.from_json(earlier.source_json)
    return Delivered(app, await new_revision(unit, viewer, app, source, rollback_of=earlier.number))
